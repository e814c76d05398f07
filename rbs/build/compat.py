"""Bazel's Label, Target and select() for Starlark files: compat.rbs and source lowering.

`compat.rbs` defines the values and helpers; `rbs.build.lower` rewrites the operations
on them that Starlark cannot be taught. `.rbs`/`.bzl` modules are always lowered; a
BUILD file only when it uses select() or Label(), so plain BUILD files cost nothing.
"""

from __future__ import annotations

import functools
from typing import Any

import starlark as sl

from rbs.build.lower import lower, private_names
from rbs.build.starlark_env import RBS_DIALECT, prelude_text, shipped_text

COMPAT_NAME = "<rbs compat>"


@functools.cache
def compat_text() -> str:
    return shipped_text("compat.rbs")


@functools.cache
def compat_ast() -> Any:
    """compat.rbs, parsed once per process."""
    return sl.parse(COMPAT_NAME, compat_text(), RBS_DIALECT)


@functools.cache
def _reserved() -> frozenset[str]:
    return private_names(prelude_text()) | private_names(compat_text())


def lower_module(text: str) -> str:
    """A `.rbs`/`.bzl` module's text, lowered (see rbs.build.lower)."""
    return lower(text, reserved=_reserved())


def lower_build(text: str) -> tuple[str, bool]:
    """(a BUILD file's text to evaluate, whether it needs compat.rbs)."""
    uses_select = "select" in text
    if not uses_select and "Label" not in text:
        return text, False
    return lower(text, reserved=_reserved(), add=uses_select), True


# bazel_skylib modules rbs ships (rules/skylib/): its own selects and common_settings,
# and skylib's pure-Starlark lib/ vendored unchanged.
_SKYLIB = {
    "@bazel_skylib//rules:common_settings.bzl": "@rbs//skylib/common_settings.rbs",
    "@bazel_skylib//lib:selects.bzl": "@rbs//skylib/selects.rbs",
}
_SKYLIB_LIB = "@bazel_skylib//lib:"
_SKYLIB_LIBS = frozenset(
    f"{n}.bzl"
    for n in (
        "collections",
        "dicts",
        "new_sets",
        "partial",
        "paths",
        "sets",
        "shell",
        "structs",
        "types",
        "versions",
    )
)


def skylib_module(module_id: str) -> str | None:
    """The `@rbs//...` file a `load()` of a bazel_skylib module reads, if rbs ships it."""
    if module_id in _SKYLIB:
        return _SKYLIB[module_id]
    name = module_id[len(_SKYLIB_LIB) :]
    if module_id.startswith(_SKYLIB_LIB) and name in _SKYLIB_LIBS:
        return f"@rbs//skylib/lib/{name}"
    return None
