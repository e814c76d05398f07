"""Aspects: `aspect(implementation, attr_aspects, attrs)` applied through
`attr.label_list(aspects = [...])`, with Bazel's semantics.

When a rule's attribute lists an aspect, the aspect runs on each target of that
attribute, after running on the targets that target reaches through the attributes
named in `attr_aspects` ("*": all of them). Its implementation gets the target (its own
providers) and a ctx whose `ctx.rule.attr` shows the target's attributes with the
aspect's providers already on the propagated dependencies; `ctx.attr` holds the aspect's
own attributes (public ones take the value of the applying rule's attribute of the same
name). The providers it returns are added to the target as the applying rule sees it.
Results are memoised per (aspect, target, parameters), so a diamond runs once. Files
and generated files get no aspect, as in Bazel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import starlark as sl

from rbs.build.actions import Current
from rbs.build.errors import BuildError, location_from_starlark, starlark_message
from rbs.build.graph import TargetInfo
from rbs.build.labels import Label
from rbs.build.rules import LABEL_KINDS, AttrSpec, RuleClass, Target, check_attrs


@dataclass(frozen=True, slots=True, kw_only=True)
class AspectClass:
    """An aspect made by `aspect()` in a `.rbs`/`.bzl` module."""

    key: str  # "<module label>%a<n>": the key its module's prelude keeps
    module: Label
    attr_aspects: tuple[str, ...]
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    doc: str = ""

    def propagates(self, attr: str) -> bool:
        return "*" in self.attr_aspects or attr in self.attr_aspects


def new_aspect(module: Label, key: str, attr_aspects: Any, attrs: Any, doc: str) -> AspectClass:
    if not isinstance(attr_aspects, list) or not all(isinstance(a, str) for a in attr_aspects):
        raise ValueError(
            f"aspect(attr_aspects = ...) must be a list of attribute names, got {attr_aspects!r}"
        )
    specs: dict[str, AttrSpec] = {}
    for name, d in (attrs or {}).items():
        if not isinstance(d, dict) or "_attr" not in d:
            raise ValueError(f"aspect attrs[{name!r}] must be made by attr.*(), e.g. attr.string()")
        spec = AttrSpec.from_starlark(name, d)
        if not name.startswith("_") and spec.kind not in ("string", "int", "bool"):
            raise ValueError(
                f"aspect attribute {name!r}: a public aspect attribute must be attr.string, "
                "attr.int or attr.bool (its value comes from the rule that applies the aspect)"
            )
        specs[name] = spec
    return AspectClass(
        key=key, module=module, attr_aspects=tuple(attr_aspects), attrs=specs, doc=str(doc)
    )


Params = tuple[tuple[str, Any], ...]


class AspectHooks:
    """Mixin of the analyser: what applying aspects to a dependency does."""

    loader: Any  # rbs.build.loader.Loader (which imports this module)
    infos: dict[Label, TargetInfo]
    plain: dict[Label, dict[str, Any]]
    _cur: Current | None
    _aspect_results: dict[tuple[str, Label, Params], dict[str, Any]]
    bin_dir: str

    if TYPE_CHECKING:  # provided by the analyser

        def resolve(
            self, label: Label, *, referrer: Target | None = None, attr: str = ""
        ) -> TargetInfo: ...
        def for_attr_spec(self, spec: AttrSpec) -> AspectHooks: ...
        def _ctx_data(
            self, target: Target, deps: dict[Label, TargetInfo], cur: Current
        ) -> dict[str, Any]: ...

    def dep_plain(self, label: Label, spec: AttrSpec, applier: Target) -> dict[str, Any]:
        """A dependency as a rule sees it: its providers plus those of the attribute's aspects."""
        an = self.for_attr_spec(spec)  # the dependency's configuration (tools: host, exec)
        base = an.plain[label]
        if not spec.aspects:
            return base
        providers = dict(base["p"])
        for key in spec.aspects:
            aspect = self.loader.aspects[key]
            params = tuple(
                (n, applier.attrs.get(n)) for n in sorted(aspect.attrs) if not n.startswith("_")
            )
            providers.update(an._apply(aspect, label, params, applier))
        return {**base, "p": providers}

    def _apply(
        self, aspect: AspectClass, label: Label, params: Params, applier: Target
    ) -> dict[str, Any]:
        memo = (aspect.key, label, params)
        have = self._aspect_results.get(memo)
        if have is not None:
            return have
        # The dependency may have been restored from the analysis cache, unloaded.
        pkg = None if label.repo else self.loader.package(label.package)
        target = pkg.targets.get(label.name) if pkg is not None else None
        if target is None:
            self._aspect_results[memo] = {}
            return {}
        self._aspect_results[memo] = {}  # a cycle through the aspect ends here
        rule_view = self._rule_view(aspect, target, params, applier)
        own = self._aspect_target(aspect, target, params)
        deps = {dep: self.resolve(dep, referrer=own, attr=a) for a, dep in own.deps()}
        cur = Current(target, deps)
        prev, self._cur = self._cur, cur
        prev_impl, self.loader.impl = self.loader.impl, self
        try:
            data = self._ctx_data(own, deps, cur)
            data["rule"] = rule_view
            result = self.loader.modules[aspect.module].call(
                "rbs_call_aspect", aspect.key, self.plain[label], data
            )
        except sl.StarlarkError as e:
            text = str(e)
            raise BuildError(
                f"in aspect {self.loader.aspect_names.get(aspect.key, aspect.key)} on {label} (applied by "
                f"{applier.label}): {starlark_message(text)}",
                location=location_from_starlark(text) or target.location,
                hint="fix the aspect implementation or the attributes it reads",
            ) from None
        finally:
            self._cur = prev
            self.loader.impl = prev_impl
        missing = sorted(p for p in cur.declared if p not in cur.produced)
        if missing:
            raise BuildError(
                f"aspect on {label} declared {missing[0].rsplit('/', 1)[-1]!r} but no action creates it",
                location=target.location,
                hint="pass every declared file as an output of some ctx.actions.* call",
            )
        providers = {str(p["_p"]): p["fields"] for p in result or []}
        providers.pop("DefaultInfo", None)  # an aspect cannot replace the target's own
        self._aspect_results[memo] = providers
        return providers

    def _rule_view(
        self, aspect: AspectClass, target: Target, params: Params, applier: Target
    ) -> dict[str, Any]:
        """ctx.rule: the target's attributes, with the aspect on the propagated deps."""
        attr: dict[str, Any] = {"name": target.label.name}
        files: dict[str, Any] = {}
        single: dict[str, Any] = {}
        exe: dict[str, Any] = {}
        for name, spec in target.rule.all_attrs().items():
            if spec.ignored and name not in ("tags", "testonly"):
                continue
            value = target.attrs.get(name)
            if spec.kind not in LABEL_KINDS:
                if spec.kind in ("output", "output_list"):
                    names = [value] if isinstance(value, str) else list(value or [])
                    pkg = target.label.package
                    outs = [self._out_file(pkg, n) for n in names]
                    attr[name] = (outs[0] if outs else None) if spec.kind == "output" else outs
                else:
                    attr[name] = value
                continue
            labels = [] if value is None else [value] if spec.kind == "label" else list(value)
            plains = []
            for dep in labels:
                if aspect.propagates(name):
                    providers = dict(self.plain[dep]["p"])
                    providers.update(self._apply(aspect, dep, params, applier))
                    plains.append({**self.plain[dep], "p": providers})
                else:
                    plains.append(self.plain[dep])
            if spec.kind == "label":
                attr[name] = plains[0] if plains else None
            else:
                attr[name] = plains
            fl = [f.to_starlark() for d in labels for f in self.infos[d].files]
            files[name] = fl
            if spec.single_file:
                single[name] = fl[0] if fl else None
            if spec.executable:
                e = self.infos[labels[0]].executable if labels else None
                exe[name] = e.to_starlark() if e else None
        return {
            "attr": attr,
            "files": files,
            "file": single,
            "executable": exe,
            "kind": target.rule.kind,
        }

    def _out_file(self, package: str, name: str) -> dict[str, Any]:
        short = f"{package}/{name}" if package else name
        owner = str(Label(package=package, name=name))
        return {"_f": [f"{self.bin_dir}/{short}", short, False, owner]}

    def _aspect_target(self, aspect: AspectClass, target: Target, params: Params) -> Target:
        """The aspect's own attributes as a target (checked like a rule's) in `target`'s name."""
        rule = RuleClass(
            key=aspect.key,
            kind=f"aspect {aspect.key.rpartition('%')[0]}",
            module=aspect.module,
            attrs=aspect.attrs,
        )
        given = {n: v for n, v in params if v is not None}
        values = check_attrs(
            rule, given, what=f"aspect on {target.label}", package=target.label.package
        )
        return Target(label=target.label, rule=rule, attrs=values, location=target.location)
