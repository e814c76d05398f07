"""Analysis of toolchain resolution and TemplateVariableInfo make variables (nothing runs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import ActionGraph
from rbs.build.toolchains import registered

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
def _tc_impl(ctx):
    return [platform_common.ToolchainInfo(compiler = ctx.attr.compiler, flags = ctx.attr.flags)]

my_toolchain = rule(implementation = _tc_impl,
                    attrs = {"compiler": attr.string(), "flags": attr.string_list()})

def _use_impl(ctx):
    tc = ctx.toolchains["//tc:type"]
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, "%s %s" % (tc.compiler, " ".join(tc.flags)))
    return [DefaultInfo(files = depset([out]))]

uses = rule(implementation = _use_impl, toolchains = ["//tc:type"])

def _vars_impl(ctx):
    return [platform_common.TemplateVariableInfo({"GREETING": ctx.attr.greeting})]

make_vars = rule(implementation = _vars_impl, attrs = {"greeting": attr.string()})
"""

TC_BUILD = """
load(":defs.bzl", "my_toolchain", "make_vars")
toolchain_type(name = "type")
my_toolchain(name = "windows_impl", compiler = "cl")
my_toolchain(name = "linux_impl", compiler = "gcc", flags = ["-O2"])
toolchain(name = "windows", toolchain_type = ":type", toolchain = ":windows_impl",
          exec_compatible_with = ["@platforms//os:windows"])
toolchain(name = "linux", toolchain_type = ":type", toolchain = ":linux_impl",
          target_compatible_with = ["@platforms//os:linux"])
make_vars(name = "vars", greeting = "hello")
"""


def files(workspace: str = 'register_toolchains("//tc:all")\n') -> dict[str, str]:
    return {
        "tc/defs.bzl": DEFS,
        "tc/BUILD": TC_BUILD,
        "app/BUILD": (
            'load("//tc:defs.bzl", "uses")\n'
            'uses(name = "u")\n'
            'genrule(name = "g", outs = ["g.txt"], toolchains = ["//tc:vars"], cmd = "echo $(GREETING) > $@")\n'
        ),
        "WORKSPACE": workspace,
    }


def graph_of(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def write_of(g: ActionGraph, owner: str) -> str:
    (a,) = [a for a in g.actions if str(a.owner) == owner]
    return a.content.decode() if a.kind == "write" else a.argv[2]


def test_first_compatible_registered_toolchain_is_chosen(make_ws: MakeWs) -> None:
    root = make_ws(files())
    (root / "WORKSPACE").write_text('register_toolchains("//tc:all")\n')
    g = graph_of(root, "//app:u")
    # windows comes first but needs a Windows exec platform: linux is chosen.
    assert write_of(g, "//app:u") == "gcc -O2"


def test_missing_toolchain_is_an_analysis_error(make_ws: MakeWs) -> None:
    root = make_ws(files())
    (root / "WORKSPACE").write_text('register_toolchains("//tc:windows")\n')
    with pytest.raises(BuildError, match="no registered toolchain of type //tc:type fits") as e:
        graph_of(root, "//app:u")
    assert "register_toolchains" in e.value.hint


def test_template_variables_reach_genrule_commands(make_ws: MakeWs) -> None:
    root = make_ws(files())
    (root / "WORKSPACE").write_text("")
    g = graph_of(root, "//app:g")
    assert "echo hello > bazel-out/k8-fastbuild/bin/app/g.txt" in write_of(g, "//app:g")


def test_toolchains_entry_without_template_variables(make_ws: MakeWs) -> None:
    root = make_ws(files())
    (root / "WORKSPACE").write_text("")
    (root / "app/BUILD").write_text(
        'genrule(name = "g", outs = ["g.txt"], toolchains = ["//tc:type"], cmd = "echo > $@")\n'
    )
    with pytest.raises(BuildError, match=r"provides no platform_common\.TemplateVariableInfo"):
        graph_of(root, "//app:g")


def test_register_toolchains_arguments_are_read_from_the_text() -> None:
    text = 'workspace(name = "x")\nregister_toolchains(\n    "//a:b",\n    "//c:all",  # two\n)\n'
    assert registered(text) == ["//a:b", "//c:all"]
