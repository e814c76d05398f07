"""`rbs query`: the target graph before analysis (`//...`, `deps(//x)`)."""

from __future__ import annotations

import re

from rbs.build.api import resolve_patterns
from rbs.build.errors import BuildError
from rbs.build.labels import Label
from rbs.build.loader import Loader

_DEPS = re.compile(r"^\s*deps\(\s*([^,()]+?)\s*(?:,\s*(\d+)\s*)?\)\s*$")


def run_query(loader: Loader, expr: str, *, cwd_package: str = "") -> list[tuple[Label, str]]:
    """(label, kind) for every target the expression names, sorted by label."""
    m = _DEPS.match(expr)
    if m is None:
        if "(" in expr:
            raise BuildError(
                f"unsupported query {expr!r}",
                hint="rbs query supports a target pattern (//pkg/...) and deps(PATTERN[, DEPTH])",
            )
        roots = resolve_patterns(loader, expr.split(), cwd_package=cwd_package)
        return sorted((lab, _kind(loader, lab)) for lab in roots)
    roots = resolve_patterns(loader, [m.group(1)], cwd_package=cwd_package)
    depth = int(m.group(2)) if m.group(2) else -1
    seen: dict[Label, int] = {}
    stack: list[tuple[Label, int, tuple[Label, ...]]] = [(r, 0, ()) for r in roots]
    while stack:
        lab, d, path = stack.pop()
        if lab in path:
            cycle = " -> ".join(str(x) for x in (*path[path.index(lab) :], lab))
            raise BuildError(f"dependency cycle: {cycle}", hint="remove one of these dependencies")
        if lab in seen and seen[lab] <= d:
            continue
        seen[lab] = d
        if depth >= 0 and d >= depth:
            continue
        for dep in _deps(loader, lab):
            stack.append((dep, d + 1, (*path, lab)))
    return sorted((lab, _kind(loader, lab)) for lab in seen)


def _deps(loader: Loader, label: Label) -> list[Label]:
    pkg = loader.package(label.package)
    if label.name in pkg.targets:
        return [d for _, d in pkg.targets[label.name].deps()]
    if label.name in pkg.outputs:
        return [label.sibling(pkg.outputs[label.name])]
    return []


def _kind(loader: Loader, label: Label) -> str:
    pkg = loader.package(label.package)
    if label.name in pkg.targets:
        return f"{pkg.targets[label.name].rule.kind} rule"
    if label.name in pkg.outputs:
        return "generated file"
    return "source file"
