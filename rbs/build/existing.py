"""What `native.existing_rules()` and computed defaults read of a package being loaded.

`existing_rules()` answers, as in Bazel, a dict from each target name declared so far in
the package to a dict of its attributes (labels as strings, plus `name` and `kind`).
Computed defaults need the parameter names of a Starlark function, which starlark-pyo3
does not expose: they are read from the `def` line of the file that defines it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rbs.build.labels import Label
from rbs.build.rules import Package, Target


def _plain(v: Any) -> Any:
    if isinstance(v, Label):
        return str(v)
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return v


def rule_dict(target: Target) -> dict[str, Any]:
    out = {name: _plain(v) for name, v in target.attrs.items() if not name.startswith("_")}
    out["name"] = target.label.name
    out["kind"] = target.rule.kind
    return out


def existing_rules(pkg: Package) -> dict[str, dict[str, Any]]:
    return {name: rule_dict(t) for name, t in pkg.targets.items()}


def features(package: list[str], target: Target) -> tuple[list[str], list[str]]:
    """ctx.features and ctx.disabled_features: the package's features, then the target's;
    "-x" disables x, and a disabled feature wins (Bazel's rule)."""
    own = target.attrs.get("features")
    if not package and not own:
        return [], []
    on: dict[str, None] = {}
    off: dict[str, None] = {}
    for f in [*package, *(own or [])]:
        if f.startswith("-"):
            off[f[1:]] = None
        else:
            on[f] = None
    return sorted(f for f in on if f not in off), sorted(off)


def function_params(function: str, files: Mapping[str, Path]) -> list[str]:
    """Parameter names of `file.bzl.fname` (how Starlark prints a function)."""
    file, _, name = function.rpartition(".")
    path = files.get(file)
    if path is None or not name:
        raise ValueError(
            f"computed default {function}: cannot find the file that defines it; define "
            "the function in the .bzl file of the rule"
        )
    m = re.search(rf"^\s*def\s+{re.escape(name)}\s*\(([^)]*)\)", path.read_text(), re.MULTILINE)
    if m is None:
        raise ValueError(f"computed default {function}: no `def {name}(...)` in {file}")
    params = []
    for part in m.group(1).split(","):
        p = part.split("=")[0].strip().lstrip("*")
        if p:
            params.append(p)
    return params
