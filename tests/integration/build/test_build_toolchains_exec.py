"""Execution with toolchains: a rule runs the tool its resolved toolchain carries, and a
genrule expands a TemplateVariableInfo make variable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rbs.build.driver import BuildOptions, run_build

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
def _tc_impl(ctx):
    return [platform_common.ToolchainInfo(tool = ctx.executable.tool, suffix = ctx.attr.suffix)]

shout_toolchain = rule(implementation = _tc_impl, attrs = {
    "tool": attr.label(executable = True, cfg = "exec"), "suffix": attr.string()})

def _shout_impl(ctx):
    tc = ctx.toolchains["//tc:shout_type"]
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.run(outputs = [out], inputs = [ctx.file.src], executable = tc.tool,
                    arguments = [ctx.file.src.path, out.path, tc.suffix])
    return [DefaultInfo(files = depset([out]))]

shout = rule(implementation = _shout_impl, toolchains = ["//tc:shout_type"],
             attrs = {"src": attr.label(allow_single_file = True)})

def _vars_impl(ctx):
    return [platform_common.TemplateVariableInfo({"WHO": ctx.attr.who})]

who_vars = rule(implementation = _vars_impl, attrs = {"who": attr.string()})
"""


def test_toolchain_tool_runs_and_make_variable_expands(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "WORKSPACE": 'register_toolchains("//tc:all")\n',
            "tc/defs.bzl": DEFS,
            "tc/upper.sh": '#!/bin/bash\ntr a-z A-Z < "$1" > "$2"; echo "$3" >> "$2"\n',
            "tc/BUILD": (
                'load(":defs.bzl", "shout_toolchain", "who_vars")\n'
                'toolchain_type(name = "shout_type")\n'
                'sh_binary(name = "upper", srcs = ["upper.sh"])\n'
                'shout_toolchain(name = "impl", tool = ":upper", suffix = "!")\n'
                'toolchain(name = "tc", toolchain_type = ":shout_type", toolchain = ":impl")\n'
                'who_vars(name = "who", who = "Ada")\n'
            ),
            "app/in.txt": "hello\n",
            "app/BUILD": (
                'load("//tc:defs.bzl", "shout")\n'
                'shout(name = "s", src = "in.txt")\n'
                'genrule(name = "g", outs = ["g.txt"], toolchains = ["//tc:who"], cmd = "echo hi $(WHO) > $@")\n'
            ),
        }
    )
    (root / "tc/upper.sh").chmod(0o755)
    res = run_build(root, ["//app:all"], options=BuildOptions(jobs=2))
    assert res.ok, [f.message for f in res.report.failures]
    assert (root / "rbs-out/bin/app/s.txt").read_text() == "HELLO\n!\n"
    assert (root / "rbs-out/bin/app/g.txt").read_text() == "hi Ada\n"
