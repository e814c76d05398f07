"""Errors for Starlark APIs rbs lacks: name the API and the file:line that used it.

A missing attribute of `ctx`, `ctx.actions`, `native` and friends surfaces from
Starlark as "Object of type `struct` has no attribute `x`" at the rule's BUILD line.
This turns it into "ctx.actions.x: Bazel has this API, rbs does not support it yet"
(or "... is no Bazel API either") at the line of the `.bzl` file that used it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rbs.build.errors import Location, location_from_starlark

_MISSING = re.compile(r"Object of type `(\w+)` has no attribute `(\w+)`")

# Bazel 4.2's names, by the last part of the expression they are read from.
BAZEL_API: dict[str, frozenset[str]] = {
    "ctx": frozenset(
        [
            "aspect_ids",
            "attr",
            "bin_dir",
            "build_file_path",
            "build_setting_value",
            "configuration",
            "coverage_instrumented",
            "created_actions",
            "disabled_features",
            "exec_groups",
            "executable",
            "expand_location",
            "expand_make_variables",
            "features",
            "file",
            "files",
            "fragments",
            "genfiles_dir",
            "host_configuration",
            "host_fragments",
            "info_file",
            "label",
            "new_file",
            "outputs",
            "resolve_command",
            "resolve_tools",
            "rule",
            "runfiles",
            "split_attr",
            "super",
            "target_platform_has_constraint",
            "toolchains",
            "var",
            "version_file",
            "workspace_name",
            "actions",
        ]
    ),
    "actions": frozenset(
        [
            "args",
            "declare_directory",
            "declare_file",
            "declare_symlink",
            "do_nothing",
            "expand_template",
            "run",
            "run_shell",
            "symlink",
            "template_dict",
            "write",
        ]
    ),
    "native": frozenset(
        [
            "alias",
            "cc_binary",
            "cc_library",
            "cc_test",
            "config_setting",
            "existing_rule",
            "existing_rules",
            "exports_files",
            "filegroup",
            "genquery",
            "genrule",
            "glob",
            "java_binary",
            "java_library",
            "java_test",
            "package_group",
            "package_name",
            "repository_name",
            "sh_binary",
            "sh_library",
            "sh_test",
            "test_suite",
            "toolchain",
            "toolchain_type",
            "py_binary",
            "py_library",
            "py_test",
            "proto_library",
            "constraint_setting",
            "constraint_value",
            "platform",
            "licenses",
        ]
    ),
}


# Bazel 4.2's global names in .bzl and BUILD files.
BAZEL_GLOBALS = frozenset(
    [
        "analysis_test_transition",
        "android_common",
        "apple_common",
        "aspect",
        "attr",
        "cc_common",
        "config_common",
        "configuration_field",
        "coverage_common",
        "depset",
        "java_common",
        "json",
        "platform_common",
        "proto_common",
        "provider",
        "PyInfo",
        "PyRuntimeInfo",
        "rule",
        "select",
        "struct",
        "testing",
        "toolchain",
        "transition",
        "CcInfo",
        "CcToolchainConfigInfo",
        "DefaultInfo",
        "InstrumentedFilesInfo",
        "JavaInfo",
        "OutputGroupInfo",
        "RunEnvironmentInfo",
        "Label",
        "module_extension",
        "repository_rule",
        "tag_class",
        "visibility",
        "existing_rules",
        "exec_group",
    ]
)
_VARIABLE = re.compile(r"Variable `(\w+)` not found")


def missing_api(
    text: str, read_line: Callable[[str, int], str | None]
) -> tuple[str, Location] | None:
    """(message, location) for a rendered Starlark error about a missing attribute."""
    v = _VARIABLE.search(text)
    if v is not None and v.group(1) in BAZEL_GLOBALS:
        loc = location_from_starlark(text)
        if loc is not None:
            return f"{v.group(1)}: Bazel has this API, but rbs does not support it yet", loc
    m = _MISSING.search(text)
    if m is None:
        return None
    attr = m.group(2)
    loc = location_from_starlark(text)
    if loc is None:
        return None
    line = read_line(loc.file, loc.line) or ""
    found = re.search(r"([A-Za-z_][\w.]*?)\s*\.\s*" + re.escape(attr) + r"\b", line)
    expr = found.group(1) if found else ""
    name = f"{expr}.{attr}" if expr else attr
    last = expr.rsplit(".", 1)[-1]
    known = BAZEL_API.get(last)
    if known is not None and attr in known:
        msg = f"{name}: Bazel has this API, but rbs does not support it yet"
    elif known is not None:
        msg = f"{name}: no such API (in Bazel or rbs)"
    else:
        msg = f"{name}: a {m.group(1)} has no attribute {attr!r}"
    return msg, loc
