"""select() and config_setting: the build configuration and how a select() value is chosen.

A `select()` reaches Python as `{"_rbs_select": [part, ...]}` (compat.rbs): each part is
either `{"conds": {label: value}, "no_match_error": str}` or, for a plain value added to
a select, `{"value": v}`. The parts are resolved one by one and summed, as Bazel sums
`select() + select()` and `select() + [...]`. A condition is a `config_setting` target
(or `//conditions:default`); it matches when every `values`, `define_values`,
`flag_values` and `constraint_values` entry holds for this build. Of several matching
conditions the one whose settings include all the others' wins; otherwise the match is
ambiguous, as in Bazel.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rbs.build.errors import BuildError, call_site
from rbs.build.labels import Label, parse_label

DEFAULT_CONDITION = "//conditions:default"
CONFIG_SETTING = "config_setting"

# `values = {...}` keys rbs answers, with the value this build has (Bazel 4.2's names).
_FIXED_VALUES = {"compilation_mode": "fastbuild", "cpu": "k8", "host_cpu": "k8"}

_CPU = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def host_constraints() -> frozenset[str]:
    """The constraint_value labels of the host platform (the one platform rbs builds for)."""
    cpu = _CPU.get(platform.machine().lower(), platform.machine().lower())
    system = platform.system().lower()
    os_name = {"darwin": "osx"}.get(system, system)
    return frozenset(
        {
            f"@platforms//os:{os_name}",
            f"@platforms//cpu:{cpu}",
            f"@bazel_tools//platforms:{os_name}",
            f"@bazel_tools//platforms:{cpu}",
        }
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildConfig:
    """What select() reads: `--define k=v` pairs and `--//pkg:flag=value` settings."""

    defines: tuple[tuple[str, str], ...] = ()
    flags: tuple[tuple[str, str], ...] = ()

    def define_map(self) -> dict[str, str]:
        return dict(self.defines)  # a later --define of one name wins, as in Bazel

    def flag_map(self) -> dict[str, str]:
        return dict(self.flags)

    def key(self) -> str:
        """A stable text naming this configuration ('' for the default one)."""
        if not self.defines and not self.flags:
            return ""
        parts = [f"D{k}={v}" for k, v in sorted(self.define_map().items())]
        parts += [f"F{k}={v}" for k, v in sorted(self.flag_map().items())]
        return "\0".join(parts)


def parse_define(text: str) -> tuple[str, str]:
    """`name=value` of a --define; ValueError says what is wrong."""
    name, eq, value = text.partition("=")
    if not eq or not name:
        raise ValueError(f"--define {text!r}: write --define name=value")
    return name, value


def is_select(value: Any) -> bool:
    return isinstance(value, dict) and "_rbs_select" in value


class SelectError(ValueError):
    """A select() that cannot be resolved; the message names the attribute and target."""


# Finds a condition's target: (its rule kind, its attribute values), or None if missing.
Lookup = Callable[[Label], "tuple[str, Mapping[str, Any]] | None"]


@dataclass(slots=True)
class Resolver:
    """Chooses select() branches for the targets of one package."""

    config: BuildConfig
    lookup: Lookup
    flag_default: Callable[[Label], str | None]

    def resolve(self, value: Any, *, attr: str, target: str, package: str) -> Any:
        parts = value["_rbs_select"]
        out: Any = None
        for i, part in enumerate(parts):
            v = part["value"] if "value" in part else self._choose(part, attr, target, package)
            out = v if i == 0 else _sum(out, v, attr, target)
        return out

    def _choose(self, part: Mapping[str, Any], attr: str, target: str, package: str) -> Any:
        conds: Mapping[str, Any] = part["conds"]
        matched: list[tuple[Label, frozenset[tuple[str, ...]], Any]] = []
        default: tuple[bool, Any] = (False, None)
        for key, value in conds.items():
            try:
                label = parse_label(key, package=package)
            except ValueError as e:
                raise SelectError(f"select() in attribute {attr!r} of {target}: {e}") from None
            if str(label) == DEFAULT_CONDITION:
                default = (True, value)
                continue
            settings = self._settings(label, attr, target)
            if settings is not None:
                matched.append((label, settings, value))
        if not matched:
            if default[0]:
                return default[1]
            custom = part.get("no_match_error") or ""
            checked = "\n".join(
                f"    {parse_label(k, package=package)}" for k in conds if k != DEFAULT_CONDITION
            )
            raise SelectError(
                custom
                or f'configurable attribute "{attr}" in {target} doesn\'t match this '
                f"configuration (would a default condition help?); conditions checked:\n{checked}"
            )
        best = [m for m in matched if all(o[1] <= m[1] for o in matched)]
        if len(best) != 1 and len({b[1] for b in best}) != 1:
            names = " ".join(str(m[0]) for m in matched)
            raise SelectError(
                f'illegal ambiguous match on configurable attribute "{attr}" in {target}: '
                f"{names}; multiple matches are not allowed unless one is more specialized"
            )
        return best[0][2]

    def _settings(self, label: Label, attr: str, target: str) -> frozenset[tuple[str, ...]] | None:
        """The settings a matching condition holds, or None if it does not match."""
        if label.repo in ("platforms", "bazel_tools"):
            # A constraint_value of the host platform is itself a condition.
            return (
                frozenset({("constraint", str(label))})
                if str(label) in host_constraints()
                else None
            )
        found = self.lookup(label)
        if found is None:
            raise SelectError(
                f"select() in attribute {attr!r} of {target}: no config_setting {label}"
            )
        kind, attrs = found
        if kind == "config_setting_group":
            return self._group(label, attrs, attr, target)
        if kind == "constraint_value":
            return None  # rbs builds for the host platform only, which has none of these
        if kind != CONFIG_SETTING:
            raise SelectError(
                f"select() in attribute {attr!r} of {target}: {label} is a {kind}, "
                "not a config_setting"
            )
        return config_matches(self.config, label, attrs, self.flag_default)

    def _group(
        self, label: Label, attrs: Mapping[str, Any], attr: str, target: str
    ) -> frozenset[tuple[str, ...]] | None:
        """selects.config_setting_group: any (match_any) or all (match_all) members."""
        held: set[tuple[str, ...]] = set()
        if attrs.get("match_all"):
            for m in _members(label, attrs, "match_all"):
                s = self._settings(m, attr, target)
                if s is None:
                    return None
                held |= s
            return frozenset(held)
        hits = [self._settings(m, attr, target) for m in _members(label, attrs, "match_any")]
        found = [h for h in hits if h is not None]
        return max(found, key=len) if found else None


def _members(label: Label, attrs: Mapping[str, Any], key: str) -> list[Label]:
    try:
        return [
            parse_label(x, package=label.package, repo=label.repo) for x in attrs.get(key) or []
        ]
    except ValueError as e:
        raise SelectError(f"config_setting_group {label}: {key}: {e}") from None


def config_matches(
    config: BuildConfig,
    label: Label,
    attrs: Mapping[str, Any],
    flag_default: Callable[[Label], str | None],
) -> frozenset[tuple[str, ...]] | None:
    """The settings of config_setting `label` when it matches this build, else None."""
    defines = config.define_map()
    flags = _flags(config)
    held: set[tuple[str, ...]] = set()
    ok = True
    for key, want in (attrs.get("values") or {}).items():
        if key == "define":
            name, _, value = str(want).partition("=")
            held.add(("define", name, value))
            ok = ok and defines.get(name) == value
        elif key in _FIXED_VALUES:
            held.add(("values", key, want))
            ok = ok and _FIXED_VALUES[key] == want
        else:
            known = ", ".join(["define", *_FIXED_VALUES])
            raise SelectError(
                f"config_setting {label}: values key {key!r} is not a flag rbs knows "
                f"(it knows: {known}); use define_values or flag_values"
            )
    for name, value in (attrs.get("define_values") or {}).items():
        held.add(("define", name, value))
        ok = ok and defines.get(name) == value
    for key, want in (attrs.get("flag_values") or {}).items():
        try:
            flag = parse_label(key, package=label.package, repo=label.repo)
        except ValueError as e:
            raise SelectError(f"config_setting {label}: flag_values: {e}") from None
        held.add(("flag", str(flag), want))
        have = flags.get(str(flag))
        if have is None:
            have = flag_default(flag)
        ok = ok and have is not None and _same_flag_value(have, want)
    constraints = host_constraints()
    for c in attrs.get("constraint_values") or []:
        try:
            cl = parse_label(c, package=label.package, repo=label.repo)
        except ValueError as e:
            raise SelectError(f"config_setting {label}: constraint_values: {e}") from None
        held.add(("constraint", str(cl)))
        ok = ok and str(cl) in constraints
    return frozenset(held) if ok else None


def setting_value(label: Label, attrs: Mapping[str, Any], config: BuildConfig) -> Any:
    """ctx.build_setting_value of a build setting target: `--//pkg:flag=value` (from an rc
    file), converted to the type of its default, else `build_setting_default`."""
    if "build_setting_default" not in attrs:
        return None
    default = attrs["build_setting_default"]
    given = _flags(config).get(str(label))
    if given is None:
        return default
    if isinstance(default, bool):
        if given.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise BuildError(f"--{label}={given}: {label} takes true or false")
        return given.lower() in ("true", "1", "yes")
    if isinstance(default, int):
        try:
            return int(given)
        except ValueError:
            raise BuildError(f"--{label}={given}: {label} takes an integer") from None
    if isinstance(default, list):
        return [x for x in given.split(",") if x]
    return given


def _flags(config: BuildConfig) -> dict[str, str]:
    out = {}
    for k, v in config.flag_map().items():
        try:
            out[str(parse_label(k))] = v
        except ValueError:
            raise BuildError(f"--{k}={v}: not a label of a build setting") from None
    return out


def _same_flag_value(have: str, want: str) -> bool:
    if have in ("True", "False", "true", "false") and want in ("True", "False", "true", "false"):
        return have.lower() == want.lower()
    return have == want


def _sum(a: Any, b: Any, attr: str, target: str) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, list) and isinstance(b, list):
        return a + b
    if isinstance(a, str) and isinstance(b, str):
        return a + b
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **b}
    raise SelectError(
        f"attribute {attr!r} of {target}: cannot add a {type(b).__name__} to a "
        f"{type(a).__name__} in select() + ..."
    )


class _Loading(Protocol):
    config: BuildConfig
    deferred_selects: dict[str, list[tuple[str, Any, dict[str, Any], str]]]
    select_errors: dict[Label, BuildError]

    @property
    def rules(self) -> Mapping[str, Any]: ...

    def package(self, name: str) -> Any: ...
    def register_in(
        self, pkg: Any, rule: str, name: Any, attrs: dict[str, Any], stack: str
    ) -> None: ...


def resolve_selects(loader: _Loading, pkg: Any) -> None:
    """Register the targets of `pkg` that use select(), with the branches chosen.

    Runs once the BUILD file has been evaluated, so a config_setting may come after
    the select() that names it; conditions in other packages load those packages."""

    def lookup(label: Label) -> tuple[str, Mapping[str, Any]] | None:
        if label.repo:
            return None
        p = pkg if label.package == pkg.name else loader.package(label.package)
        t = p.targets.get(label.name)
        return None if t is None else (t.rule.kind, t.attrs)

    def flag_default(label: Label) -> str | None:
        found = lookup(label)
        if found is None or "build_setting_default" not in found[1]:
            return None
        v = found[1]["build_setting_default"]
        return ("True" if v else "False") if isinstance(v, bool) else str(v)

    resolver = Resolver(loader.config, lookup, flag_default)
    for rule, name, attrs, stack in loader.deferred_selects.pop(pkg.name):
        what = f"{loader.rules[rule].kind} //{pkg.name}:{name}"
        loc = call_site(stack, {pkg.build_file: pkg.source_lines})
        try:
            chosen = {
                k: resolver.resolve(v, attr=k, target=what, package=pkg.name) if is_select(v) else v
                for k, v in attrs.items()
            }
            loader.register_in(
                pkg, rule, name, {k: v for k, v in chosen.items() if v is not None}, stack
            )
        except SelectError as e:
            # Like an analysis error in Bazel: only this target fails, when it is built.
            loader.select_errors[Label(package=pkg.name, name=name)] = BuildError(
                str(e), location=loc, hint="add a matching condition or //conditions:default"
            )
        except ValueError as e:
            raise BuildError(str(e), location=loc) from None
