"""Minimal toolchain resolution, and the make variables of `toolchains = [...]` targets.

As in Bazel: a rule made with `rule(toolchains = ["//pkg:my_type"])` gets
`ctx.toolchains["//pkg:my_type"]`, the `platform_common.ToolchainInfo` of the first
registered `toolchain()` target whose `toolchain_type` is that type and whose
`exec_compatible_with` / `target_compatible_with` constraints the host platform has
(rbs builds for the host platform only, see rbs.build.select.host_constraints).
Toolchains are registered by `register_toolchains("//pkg:name", "//pkg:all", ...)` in
WORKSPACE, WORKSPACE.bazel or MODULE.bazel, in that order; rbs reads those calls'
string arguments from the file text.

Separately, any target's `toolchains` attribute may name targets returning
`platform_common.TemplateVariableInfo`: their variables join `ctx.var` (so a genrule's
`$(VAR)` expands), as Bazel's make-variable toolchains do.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Protocol

from rbs.build.errors import BuildError
from rbs.build.graph import TargetInfo
from rbs.build.labels import Label, parse_label, parse_pattern
from rbs.build.rules import Target
from rbs.build.select import host_constraints

_REGISTER = re.compile(r"register_toolchains\s*\(([^)]*)\)", re.DOTALL)


def toolchain_types(values: Any, module: Label) -> tuple[str, ...]:
    """rule(toolchains = [...]) as canonical label strings (relative to the rule's file)."""
    if not values:
        return ()
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(
            f"rule(toolchains = ...) must be a list of toolchain_type labels, got {values!r}"
        )
    out = []
    for v in values:
        try:
            out.append(str(parse_label(v, package=module.package, repo=module.repo)))
        except ValueError as e:
            raise ValueError(f"rule(toolchains = ...): {e}") from None
    return tuple(out)


def registered(text: str) -> list[str]:
    """The string arguments of every register_toolchains(...) call in a WORKSPACE text."""
    out: list[str] = []
    for m in _REGISTER.finditer(text):
        for part in m.group(1).split(","):
            part = part.strip()
            if part:
                try:
                    value = ast.literal_eval(part)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(value, str):
                    out.append(value)
    return out


class _Analyzer(Protocol):
    loader: Any
    plain: dict[Label, dict[str, Any]]

    def resolve(
        self, label: Label, *, referrer: Target | None = None, attr: str = ""
    ) -> TargetInfo: ...


def _registrations(an: _Analyzer) -> list[Target]:
    cached: list[Target] | None = getattr(an, "_toolchain_targets", None)
    if cached is not None:
        return cached
    ws = an.loader.ws
    patterns: list[str] = []
    for name in ("WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel"):
        p = ws.root / name
        if p.is_file():
            patterns += registered(p.read_text(errors="replace"))
    found: list[Target] = []
    for text in patterns:
        try:
            pat = parse_pattern(text)
        except ValueError as e:
            raise BuildError(
                f"register_toolchains({text!r}): {e}", hint="write //pkg:name or //pkg:all"
            ) from None
        for pkg_name in ws.expand(pat):
            pkg = an.loader.package(pkg_name)
            names = [pat.name] if pat.name is not None else list(pkg.targets)
            for n in names:
                t = pkg.targets.get(n)
                if t is not None and t.rule.kind == "toolchain" and t not in found:
                    found.append(t)
    an._toolchain_targets = found  # type: ignore[attr-defined]
    return found


def registered_packages(an: _Analyzer) -> set[str]:
    """The packages of every registered toolchain: what choosing one reads."""
    return {t.label.package for t in _registrations(an)}


def _compatible(t: Target) -> bool:
    host = host_constraints()
    pkg, repo = t.label.package, t.label.repo
    for attr in ("exec_compatible_with", "target_compatible_with"):
        for c in t.attrs.get(attr) or []:
            if str(parse_label(c, package=pkg, repo=repo)) not in host:
                return False
    return True


def toolchains_for(an: _Analyzer, target: Target) -> dict[str, Any]:
    """ctx.toolchains of `target`: toolchain_type label -> plain ToolchainInfo fields."""
    out: dict[str, Any] = {}
    for type_label in target.rule.toolchains:
        chosen = None
        for t in _registrations(an):
            if str(t.attrs.get("toolchain_type")) == type_label and _compatible(t):
                if t.attrs.get("target_settings"):
                    raise BuildError(
                        f"toolchain {t.label}: target_settings is not supported by rbs",
                        location=t.location,
                        hint="leave target_settings empty; rbs builds for the host platform",
                    )
                chosen = t
                break
        if chosen is None:
            raise BuildError(
                f"{target.rule.kind} {target.label}: no registered toolchain of type "
                f"{type_label} fits the host platform",
                location=target.location,
                hint="declare toolchain(toolchain_type = ..., toolchain = ...) and list it in "
                'register_toolchains("//pkg:all") in WORKSPACE',
            )
        impl = chosen.attrs["toolchain"]
        an.resolve(impl, referrer=chosen, attr="toolchain")
        info = an.plain[impl]["p"].get("ToolchainInfo")
        if info is None:
            raise BuildError(
                f"toolchain {chosen.label}: {impl} returns no platform_common.ToolchainInfo",
                location=chosen.location,
                hint="return [platform_common.ToolchainInfo(...)] from the toolchain's rule",
            )
        out[type_label] = info
    return out


def template_variables(an: _Analyzer, target: Target) -> dict[str, str]:
    """Make variables from the TemplateVariableInfo of the `toolchains` attribute's targets."""
    out: dict[str, str] = {}
    pkg, repo = target.label.package, target.label.repo
    for text in target.attrs.get("toolchains") or []:
        try:
            label = parse_label(str(text), package=pkg, repo=repo)
        except ValueError as e:
            raise BuildError(
                f"{target.label}: attribute 'toolchains': {e}", location=target.location
            ) from None
        an.resolve(label, referrer=target, attr="toolchains")
        info = an.plain[label]["p"].get("TemplateVariableInfo")
        if info is None:
            raise BuildError(
                f"{target.rule.kind} {target.label}: toolchains entry {label} provides no "
                "platform_common.TemplateVariableInfo",
                location=target.location,
                hint="name targets that return TemplateVariableInfo(...) there",
            )
        out.update({str(k): str(v) for k, v in (info.get("variables") or {}).items()})
    return out
