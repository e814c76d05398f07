"""Execution of aspects: files an aspect writes on each dependency feed the rule's action."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rbs.build.driver import BuildOptions, run_build

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
SizesInfo = provider(fields = ["files"])

def _sizes_impl(target, ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".size")
    srcs = ctx.rule.files.srcs
    ctx.actions.run_shell(outputs = [out], inputs = srcs,
        command = "cat %s | wc -c > %s" % (" ".join([f.path for f in srcs]) or "/dev/null", out.path))
    return [SizesInfo(files = depset([out], transitive = [d[SizesInfo].files for d in ctx.rule.attr.deps]))]

sizes = aspect(implementation = _sizes_impl, attr_aspects = ["deps"])

def _report_impl(ctx):
    files = depset(transitive = [d[SizesInfo].files for d in ctx.attr.deps]).to_list()
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.run_shell(outputs = [out], inputs = files,
        command = "for f in %s; do echo $(basename $f) $(cat $f); done > %s" % (" ".join([f.path for f in files]), out.path))
    return [DefaultInfo(files = depset([out]))]

report = rule(implementation = _report_impl, attrs = {"deps": attr.label_list(aspects = [sizes])})
"""


def test_aspect_actions_run_and_feed_the_rule(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": DEFS,
            "pkg/a.sh": "12345",
            "pkg/b.sh": "123",
            "pkg/BUILD": (
                'load(":defs.bzl", "report")\n'
                'sh_library(name = "a", srcs = ["a.sh"])\n'
                'sh_library(name = "b", srcs = ["b.sh"], deps = [":a"])\n'
                'report(name = "r", deps = [":b"])\n'
            ),
        }
    )
    res = run_build(root, ["//pkg:r"], options=BuildOptions(jobs=2))
    assert res.ok, [f.message for f in res.report.failures]
    assert (root / "rbs-out/bin/pkg/r.txt").read_text() == "a.size 5\nb.size 3\n"
    # Changing a file reruns the aspect's action for it and the report, nothing else.
    (root / "pkg/a.sh").write_text("1")
    res = run_build(root, ["//pkg:r"], options=BuildOptions(jobs=2))
    assert res.ok and res.report.executed == 2
    assert (root / "rbs-out/bin/pkg/r.txt").read_text() == "a.size 1\nb.size 3\n"
