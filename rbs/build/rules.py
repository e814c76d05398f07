"""Rule classes, attribute schemas, targets and packages: what loading produces."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rbs.build.errors import Location, closest
from rbs.build.labels import Label, parse_label

LABEL_KINDS = ("label", "label_list")
OUTPUT_KINDS = ("output", "output_list")
_EMPTY: dict[str, Any] = {
    "label": None,
    "label_list": [],
    "string": "",
    "string_list": [],
    "int": 0,
    "int_list": [],
    "bool": False,
    "string_dict": {},
    "output": None,
    "output_list": [],
}


@dataclass(frozen=True, slots=True, kw_only=True)
class AttrSpec:
    """One attribute of a rule: its kind, default and constraints."""

    name: str
    kind: str
    default: Any = None
    mandatory: bool = False
    allow_files: bool | tuple[str, ...] = False
    single_file: bool = False
    executable: bool = False
    values: tuple[Any, ...] = ()
    doc: str = ""
    ignored: bool = False  # accepted for Bazel compatibility, not used by rbs
    aspects: tuple[str, ...] = ()  # keys of the aspects applied to this attribute's targets
    cfg: str = ""  # "exec" or "host" for tools built in that configuration

    @classmethod
    def from_starlark(cls, name: str, d: Mapping[str, Any]) -> AttrSpec:
        kind = str(d.get("_attr", ""))
        if kind not in _EMPTY:
            raise ValueError(f"attribute {name!r}: unknown kind {kind!r}; use attr.label(...) etc.")
        allow = d.get("allow_files")
        single = d.get("allow_single_file")
        allow_files: bool | tuple[str, ...] = False
        for v in (allow, single):
            if v is True:
                allow_files = True
            elif isinstance(v, list):
                allow_files = tuple(str(x) for x in v)
        default = d.get("default")
        return cls(
            name=name,
            kind=kind,
            default=_EMPTY[kind] if default is None else default,
            mandatory=bool(d.get("mandatory")),
            allow_files=allow_files,
            single_file=single not in (None, False),
            executable=bool(d.get("executable")),
            values=tuple(d.get("values") or ()),
            doc=str(d.get("doc") or ""),
            aspects=tuple(str(a) for a in d.get("aspects") or ()),
            cfg=str(d.get("cfg") or ""),
        )


def _common(name: str, kind: str, default: Any = None) -> AttrSpec:
    return AttrSpec(
        name=name, kind=kind, default=_EMPTY[kind] if default is None else default, ignored=True
    )


# Attributes every rule accepts (Bazel's common attributes); rbs ignores most of them.
COMMON_ATTRS = {
    a.name: a
    for a in (
        _common("visibility", "string_list"),
        _common("tags", "string_list"),
        _common("testonly", "bool"),
        _common("deprecation", "string"),
        _common("features", "string_list"),
        _common("licenses", "string_list"),
        _common("compatible_with", "string_list"),
        _common("target_compatible_with", "string_list"),
        _common("exec_compatible_with", "string_list"),
        _common("restricted_to", "string_list"),
        _common("applicable_licenses", "string_list"),
        _common("package_metadata", "string_list"),
        _common("exec_properties", "string_dict"),
        _common("toolchains", "string_list"),
    )
}
BINARY_ATTRS = {
    a.name: a
    for a in (
        AttrSpec(name="args", kind="string_list", default=[]),
        AttrSpec(name="env", kind="string_dict", default={}),
        _common("output_licenses", "string_list"),
    )
}
TEST_ATTRS = {
    a.name: a
    for a in (
        _common("size", "string", "medium"),
        _common("timeout", "string"),
        _common("flaky", "bool"),
        _common("shard_count", "int"),
        _common("local", "bool"),
        _common("env_inherit", "string_list"),
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleClass:
    """A rule made by `rule()` in a `.rbs` module."""

    key: str  # "<module label>%<n>": the rule id its module's prelude keeps
    kind: str  # the name it was assigned to (genrule, my_rule, ...)
    module: Label
    attrs: Mapping[str, AttrSpec]
    executable: bool = False
    test: bool = False
    doc: str = ""
    # rule(outputs = {"md5": "%{name}.md5"}): implicit outputs, key -> file name template.
    outputs: tuple[tuple[str, str], ...] = ()
    # rule(toolchains = [...]): the toolchain_type labels its ctx.toolchains answers.
    toolchains: tuple[str, ...] = ()
    # The implementation as Starlark prints it ("file.rbs.fname"; rbs.build.ctxreads).
    impl: str = ""
    # Made once from the fields above (every target of the rule reads them).
    _all: Mapping[str, AttrSpec] = field(init=False, repr=False, compare=False)
    _defaults: tuple[tuple[str, AttrSpec, int], ...] = field(init=False, repr=False, compare=False)
    _ctx: tuple[tuple[str, AttrSpec, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        out = dict(COMMON_ATTRS)
        if self.executable or self.test:
            out.update(BINARY_ATTRS)
        if self.test:
            out.update(TEST_ATTRS)
        out.update(self.attrs)
        object.__setattr__(self, "_all", out)
        object.__setattr__(
            self,
            "_defaults",
            tuple((name, spec, _default_kind(spec)) for name, spec in out.items()),
        )
        object.__setattr__(
            self,
            "_ctx",
            tuple(
                (name, spec, CTX_KINDS.get(spec.kind, CTX_PLAIN))
                for name, spec in out.items()
                # Every value crossing into Starlark costs; rules never read these.
                if not spec.ignored or name in ("tags", "testonly")
            ),
        )

    def all_attrs(self) -> Mapping[str, AttrSpec]:
        """Every attribute a target of this rule has: the common ones, then the rule's."""
        return self._all

    def ctx_attrs(self) -> tuple[tuple[str, AttrSpec, int], ...]:
        """The attributes an implementation's ctx holds, in order, with their CTX_* kind."""
        return self._ctx


# How an attribute's value reaches ctx (rbs.build.ctxdata).
CTX_PLAIN, CTX_LABEL, CTX_LABEL_LIST, CTX_OUTPUT, CTX_OUTPUT_LIST = range(5)
CTX_KINDS = {
    "label": CTX_LABEL,
    "label_list": CTX_LABEL_LIST,
    "output": CTX_OUTPUT,
    "output_list": CTX_OUTPUT_LIST,
}


# How check_attrs fills in an attribute's default (see _default_kind).
_SHARED, _LIST, _DICT, _LABELS, _MANDATORY = range(5)


def _default_kind(spec: AttrSpec) -> int:
    if spec.mandatory:
        return _MANDATORY
    default = spec.default
    if spec.kind in LABEL_KINDS and default:
        return _LABELS
    if isinstance(default, list):
        return _LIST
    if isinstance(default, dict):
        return _DICT
    return _SHARED


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """A rule instance in a package, with attribute values checked and converted."""

    label: Label
    rule: RuleClass
    attrs: Mapping[str, Any]  # label attrs hold Label / list[Label]; outputs hold names
    location: Location | None = None

    def deps(self) -> list[tuple[str, Label]]:
        out: list[tuple[str, Label]] = []
        for name, spec in self.rule.attrs.items():
            v = self.attrs.get(name)
            if spec.kind == "label" and v is not None:
                out.append((name, v))
            elif spec.kind == "label_list":
                out.extend((name, x) for x in v or ())
        return out

    def implicit_outputs(self) -> dict[str, str]:
        """rule(outputs = ...) with `%{name}` and `%{attr}` filled in: key -> file name."""
        return {key: _fill_template(tpl, self) for key, tpl in self.rule.outputs}

    def output_names(self) -> list[str]:
        out: list[str] = list(self.implicit_outputs().values())
        for name, spec in self.rule.attrs.items():
            v = self.attrs.get(name)
            if spec.kind == "output" and v:
                out.append(v)
            elif spec.kind == "output_list":
                out.extend(v or ())
        return out


@dataclass(slots=True, kw_only=True)
class Package:
    """One loaded BUILD file: its targets and the generated files they own."""

    name: str
    build_file: str  # workspace-relative path, as shown in error messages
    targets: dict[str, Target] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)  # output file name -> rule name
    exported: set[str] = field(default_factory=set)
    source_lines: list[str] = field(default_factory=list)
    features: list[str] = field(default_factory=list)  # package(features = [...])

    def names(self) -> list[str]:
        return sorted({*self.targets, *self.outputs})


_TEMPLATE_VAR = re.compile(r"%\{([A-Za-z_]\w*)\}")


def _fill_template(template: str, target: Target) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name == "name":
            return target.label.name
        value = target.attrs.get(name)
        if isinstance(value, Label):
            return value.name
        if isinstance(value, str):
            return value
        raise ValueError(
            f"rule(outputs = ...) of {target.rule.kind}: %{{{name}}} must name the target's "
            f"name or a string or label attribute, and {target.label} has no such value"
        )

    return _TEMPLATE_VAR.sub(one, template)


def config_of(spec: AttrSpec, current: str) -> str:
    """The configuration an attribute's targets are built in, from a target in `current`:
    "exec" or "host" for tools; the host configuration keeps its deps in host (Bazel)."""
    if current == "host" or spec.cfg not in ("exec", "host"):
        return current
    return spec.cfg


def _type_name(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    return {str: "string", int: "int", list: "list", dict: "dict"}.get(type(v), type(v).__name__)


def label_text(value: Any) -> Any:
    """A Label() value (a dict once out of Starlark) as its string; anything else as is."""
    if isinstance(value, dict) and value.get("_rbs_kind") == "label":
        return value.get("_s")
    return value


def _bad(spec: AttrSpec, value: Any, what: str, want: str) -> ValueError:
    return ValueError(
        f"attribute {spec.name!r} of {what} must be {want}, got {_type_name(value)} {value!r}"
    )


def _label(spec: AttrSpec, value: Any, text: Any, what: str, package: str, repo: str) -> Label:
    # `value` is the attribute's whole value (what a type error shows), `text` one label.
    text = label_text(text)
    if not isinstance(text, str):
        raise _bad(spec, value, what, "a label string like ':name' or '//pkg:name'")
    try:
        return parse_label(text, package=package, repo=repo)
    except ValueError as e:
        raise ValueError(f"attribute {spec.name!r} of {what}: {e}") from None


def convert_attr(spec: AttrSpec, value: Any, *, what: str, package: str, repo: str = "") -> Any:
    """Check one attribute value against its spec and convert labels; ValueError says why."""
    kind = spec.kind
    if kind == "label":
        return None if value is None else _label(spec, value, value, what, package, repo)
    if kind == "label_list":
        if not isinstance(value, list):
            raise _bad(spec, value, what, "a list of labels")
        return [_label(spec, value, x, what, package, repo) for x in value]
    if kind == "string":
        if not isinstance(value, str):
            raise _bad(spec, value, what, "a string")
        if spec.values and value not in spec.values:
            raise ValueError(
                f"attribute {spec.name!r} of {what} must be one of {list(spec.values)}, got {value!r}"
            )
        return value
    if kind in ("string_list", "output_list"):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise _bad(spec, value, what, "a list of strings")
        if kind == "output_list":
            return [
                _output_name(_label(spec, value, x, what, package, repo), spec, what, package)
                for x in value
            ]
        return list(value)
    if kind == "output":
        if value is None:
            return None
        if not isinstance(value, str):
            raise _bad(spec, value, what, "a file name string")
        return _output_name(_label(spec, value, value, what, package, repo), spec, what, package)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(spec, value, what, "an int")
        return value
    if kind == "int_list":
        if not isinstance(value, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in value
        ):
            raise _bad(spec, value, what, "a list of ints")
        return list(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise _bad(spec, value, what, "True or False")
    if kind == "string_dict":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise _bad(spec, value, what, "a dict of strings to strings")
        return dict(value)
    raise ValueError(f"attribute {spec.name!r}: unsupported kind {kind!r}")


def implicit_outputs(outputs: Any) -> tuple[tuple[str, str], ...]:
    """Check rule(outputs = {...}): a dict of output keys to file name templates."""
    if outputs is None:
        return ()
    if not isinstance(outputs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in outputs.items()
    ):
        raise ValueError(
            "rule(outputs = ...) must be a dict of names to file name templates, "
            'e.g. {"md5": "%{name}.md5"} (a function there is not supported by rbs)'
        )
    return tuple(sorted(outputs.items()))


def _output_name(lab: Label, spec: AttrSpec, what: str, package: str) -> str:
    # An output attribute holds a label of a file in the target's own package (":dog.md5"
    # and "dog.md5" are the same file); what the rule sees is its name in the package.
    if lab.repo or lab.package != package:
        raise ValueError(
            f"attribute {spec.name!r} of {what}: output {lab} must be in the target's own "
            f"package //{package}; write a file name like 'out.txt'"
        )
    return lab.name


def check_attrs(
    rule: RuleClass, given: Mapping[str, Any], *, what: str, package: str
) -> dict[str, Any]:
    """Every attribute of a new target: known names, right types, mandatory ones present."""
    specs = rule.all_attrs()
    out: dict[str, Any] = {}
    for name, value in given.items():
        spec = specs.get(name)
        if spec is not None and isinstance(value, dict) and "_rbs_computed" in value:
            # A computed default (prelude.rbs's rule()): private attributes take these.
            out[name] = convert_attr(spec, value["_rbs_computed"], what=what, package=package)
            continue
        if spec is not None and name.startswith("_"):
            raise ValueError(
                f"attribute {name!r} of {rule.kind} is private (it starts with '_'); it keeps its default"
            )
        if spec is None:
            near = closest(name, [n for n in specs if not specs[n].ignored] or list(specs))
            hint = f"; did you mean {near!r}?" if near else ""
            known = ", ".join(sorted(n for n in rule.attrs))
            raise ValueError(
                f"{rule.kind} has no attribute {name!r}{hint} ({rule.kind} takes: name, {known})"
            )
        out[name] = convert_attr(spec, value, what=what, package=package)
    for name, spec, how in rule._defaults:
        if name in out:
            continue
        default = spec.default
        if how == _SHARED:
            out[name] = default
        elif how == _LIST:
            out[name] = list(default)
        elif how == _DICT:
            out[name] = dict(default)
        elif how == _MANDATORY:
            raise ValueError(f"{what} is missing the mandatory attribute {name!r}")
        else:
            repo = rule.module.repo
            pkg = rule.module.package
            if spec.kind == "label":
                out[name] = parse_label(label_text(default), package=pkg, repo=repo)
            else:
                out[name] = [parse_label(label_text(x), package=pkg, repo=repo) for x in default]
    return out
