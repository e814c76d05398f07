"""Analysis of aspects: propagation along attr_aspects, providers, parameters, actions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import BIN_DIR, ActionGraph

MakeWs = Callable[[dict[str, str]], Path]

ASPECT = """
CollectedInfo = provider(fields = ["files", "count"])

def _collect_impl(target, ctx):
    direct = [f for f in ctx.rule.files.srcs if ctx.attr.extension == "*" or f.extension == ctx.attr.extension]
    deps = [d[CollectedInfo] for d in ctx.rule.attr.deps]
    count = 1
    for d in deps:
        count += d.count
    # One action per target the aspect visits: the diamond below must run it once.
    stamp = ctx.actions.declare_file("%s.%s.stamp" % (ctx.label.name, ctx.attr.extension.replace("*", "all")))
    ctx.actions.write(stamp, ctx.rule.kind + " " + str(len(direct)))
    return [CollectedInfo(
        files = depset(direct, transitive = [d.files for d in deps]),
        count = count,
    ), OutputGroupInfo(stamps = depset([stamp]))]

collect = aspect(
    implementation = _collect_impl,
    attr_aspects = ["deps"],
    attrs = {"extension": attr.string(values = ["*", "h", "cc"])},
)

def _collector_impl(ctx):
    lines = []
    stamps = []
    for dep in ctx.attr.deps:
        info = dep[CollectedInfo]
        lines.append("%s %d %s" % (dep.label.name, info.count, [f.short_path for f in info.files.to_list()]))
    out = ctx.actions.declare_file(ctx.label.name + ".files")
    ctx.actions.write(out, "\\n".join(lines) + "\\n")
    return [DefaultInfo(files = depset([out]))]

collector = rule(
    implementation = _collector_impl,
    attrs = {
        "deps": attr.label_list(aspects = [collect]),
        "extension": attr.string(default = "*"),
    },
)
"""

BUILD = """
load(":defs.bzl", "collector")
sh_library(name = "base", srcs = ["base.h", "base.cc"])
sh_library(name = "left", srcs = ["left.h"], deps = [":base"])
sh_library(name = "right", srcs = ["right.cc"], deps = [":base"])
sh_library(name = "top", srcs = ["top.cc"], deps = [":left", ":right"])
collector(name = "everything", deps = [":top"])
collector(name = "headers", deps = [":top", ":base"], extension = "h")
"""


def ws(make_ws: MakeWs) -> Path:
    files = {f"pkg/{n}": "" for n in ("base.h", "base.cc", "left.h", "right.cc", "top.cc")}
    return make_ws({**files, "pkg/defs.bzl": ASPECT, "pkg/BUILD": BUILD})


def graph_of(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def content(g: ActionGraph, short: str) -> str:
    (a,) = [a for a in g.actions if a.outputs == (f"{BIN_DIR}/{short}",)]
    return a.content.decode()


def test_aspect_propagates_along_deps_and_adds_providers(make_ws: MakeWs) -> None:
    g = graph_of(ws(make_ws), "//pkg:everything")
    # postorder depset: base's files first, each file once.
    assert content(g, "pkg/everything.files") == (
        'top 5 ["pkg/base.h", "pkg/base.cc", "pkg/left.h", "pkg/right.cc", "pkg/top.cc"]\n'
    )
    # The aspect ran once per target it reached (the diamond's base once).
    stamps = sorted(
        a.outputs[0].rpartition("/")[2] for a in g.actions if a.outputs[0].endswith(".stamp")
    )
    assert stamps == ["base.all.stamp", "left.all.stamp", "right.all.stamp", "top.all.stamp"]
    assert content(g, "pkg/base.all.stamp") == "sh_library 2"
    # The aspect's own actions belong to the target it visited.
    (a,) = [a for a in g.actions if a.outputs[0].endswith("top.all.stamp")]
    assert str(a.owner) == "//pkg:top"


def test_public_aspect_attribute_takes_the_rule_value(make_ws: MakeWs) -> None:
    g = graph_of(ws(make_ws), "//pkg:headers")
    assert content(g, "pkg/headers.files") == (
        'top 5 ["pkg/base.h", "pkg/left.h"]\nbase 1 ["pkg/base.h"]\n'
    )


def test_rule_without_the_aspect_sees_no_aspect_provider(make_ws: MakeWs) -> None:
    root = ws(make_ws)
    (root / "pkg/plain.bzl").write_text(
        'load(":defs.bzl", "CollectedInfo")\n'
        "def _impl(ctx):\n"
        "    out = ctx.actions.declare_file(ctx.label.name)\n"
        "    ctx.actions.write(out, str([CollectedInfo in d for d in ctx.attr.deps]))\n"
        "    return [DefaultInfo(files = depset([out]))]\n"
        'plain = rule(implementation = _impl, attrs = {"deps": attr.label_list()})\n'
    )
    with (root / "pkg/BUILD").open("a") as f:
        f.write('load(":plain.bzl", "plain")\nplain(name = "p", deps = [":top"])\n')
    assert content(graph_of(root, "//pkg:p"), "pkg/p") == "[False]"


def test_error_in_aspect_names_the_aspect_and_file(make_ws: MakeWs) -> None:
    root = ws(make_ws)
    (root / "pkg/defs.bzl").write_text(ASPECT.replace("ctx.rule.attr.deps]", "ctx.rule.attr.nope]"))
    with pytest.raises(
        BuildError, match=r"in aspect collect on //pkg:\w+ \(applied by //pkg:everything\)"
    ) as e:
        graph_of(root, "//pkg:everything")
    assert e.value.location is not None and e.value.location.file == "pkg/defs.bzl"


def test_aspect_attribute_kinds_are_checked(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _i(target, ctx):\n    return []\n"
                'a = aspect(implementation = _i, attrs = {"deps": attr.label_list()})\n'
            ),
            "pkg/BUILD": 'load(":defs.bzl", "a")\n',
        }
    )
    with pytest.raises(BuildError, match=r"public aspect attribute must be attr\.string"):
        graph_of(root)


def test_aspects_take_only_aspects(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _impl(ctx):\n    pass\n"
                'r = rule(implementation = _impl, attrs = {"deps": attr.label_list(aspects = ["x"])})\n'
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\n',
        }
    )
    with pytest.raises(BuildError, match=r"aspects = \[...\]\) takes aspects made by aspect\(\)"):
        graph_of(root)


def test_aspect_on_a_tool_attribute_visits_the_exec_configuration(make_ws: MakeWs) -> None:
    root = ws(make_ws)
    (root / "pkg/tool.bzl").write_text(
        'load(":defs.bzl", "collect", "CollectedInfo")\n'
        "def _impl(ctx):\n"
        "    out = ctx.actions.declare_file(ctx.label.name + '.txt')\n"
        "    info = ctx.attr.tool[CollectedInfo]\n"
        "    ctx.actions.write(out, '%d %s' % (info.count, ctx.executable.tool.path))\n"
        "    return [DefaultInfo(files = depset([out]))]\n"
        "uses_tool = rule(implementation = _impl, attrs = {'tool': attr.label(\n"
        "    executable = True, cfg = 'exec', aspects = [collect]), 'extension': attr.string(default = '*')})\n"
    )
    with (root / "pkg/BUILD").open("a") as f:
        f.write(
            'load(":tool.bzl", "uses_tool")\n'
            'sh_binary(name = "bin", srcs = ["top.cc"], deps = [":top"])\n'
            'uses_tool(name = "ut", tool = ":bin")\n'
        )
    g = graph_of(root, "//pkg:ut")
    # bin, then top (which counts base twice, once through each side of the diamond).
    assert content(g, "pkg/ut.txt") == "6 bazel-out/k8-opt-exec-2B5CBBC6/bin/pkg/bin"
