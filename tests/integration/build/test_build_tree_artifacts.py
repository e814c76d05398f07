"""Tree artifacts (ctx.actions.declare_directory): the action graph, local execution, the
action cache, runfiles, args.add_all(directory) expansion, and errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.driver import BuildOptions, run_build
from rbs.build.errors import BuildError
from rbs.build.graph import BIN_DIR
from rbs.build.labels import Label

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
def _gen_impl(ctx):
    d = ctx.actions.declare_directory(ctx.label.name + "_files")
    ctx.actions.run_shell(outputs = [d], inputs = ctx.files.srcs,
        command = "mkdir -p {d}/sub && for s in {srcs}; do cp $s {d}/$(basename $s); done && echo deep > {d}/sub/z.txt".format(
            d = d.path, srcs = " ".join([f.path for f in ctx.files.srcs])))
    return [DefaultInfo(files = depset([d]), runfiles = ctx.runfiles(files = [d]))]

gen = rule(implementation = _gen_impl, attrs = {"srcs": attr.label_list(allow_files = True)})

def _cat_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    args = ctx.actions.args()
    args.add(out)
    args.add_all(ctx.files.srcs, format_each = "in=%s", before_each = "--")
    ctx.actions.run_shell(outputs = [out], inputs = ctx.files.srcs, arguments = [args],
        command = 'o=$1; shift; for a in "$@"; do [ "$a" = -- ] && continue; f=${a#in=}; echo "$a $(cat $f)"; done > $o')
    return [DefaultInfo(files = depset([out]))]

cat = rule(implementation = _cat_impl, attrs = {"srcs": attr.label_list()})

def _runner_impl(ctx):
    ctx.actions.write(ctx.outputs.executable,
        "#!/bin/bash\\ncat %s/a.txt %s/sub/z.txt\\n" % (ctx.files.data[0].short_path, ctx.files.data[0].short_path))
    return [DefaultInfo(runfiles = ctx.runfiles(files = ctx.files.data))]

runner_test = rule(implementation = _runner_impl, test = True, attrs = {"data": attr.label_list()})
"""

FILES = {
    "pkg/defs.bzl": DEFS,
    "pkg/a.txt": "alpha\n",
    "pkg/b.txt": "beta\n",
    "pkg/BUILD": (
        'load(":defs.bzl", "gen", "cat", "runner_test")\n'
        'gen(name = "g", srcs = ["a.txt", "b.txt"])\n'
        'cat(name = "c", srcs = [":g"])\n'
        'runner_test(name = "t", data = [":g"])\n'
    ),
}
DIR = f"{BIN_DIR}/pkg/g_files"


def test_declare_directory_in_the_action_graph(make_ws: MakeWs) -> None:
    _, g = load_and_analyze(make_ws(FILES), ["//pkg:c"])
    (gen,) = [a for a in g.actions if str(a.owner) == "//pkg:g"]
    assert gen.outputs == (DIR,) and gen.output_dirs == (DIR,)
    (f,) = g.targets[Label(package="pkg", name="g")].files
    assert f.is_directory and f.path == DIR
    (cat,) = [a for a in g.actions if str(a.owner) == "//pkg:c"]
    assert cat.input_dirs == (DIR,) and DIR in cat.inputs
    # add_all(directory) is expanded when the action runs: a marker until then.
    assert any(a.startswith("\0rbs-dir\0" + DIR) for a in cat.argv)


def test_tree_artifact_builds_feeds_its_consumer_and_is_cached(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    res = run_build(root, ["//pkg:c"], options=BuildOptions(jobs=2))
    assert res.ok, [f.message for f in res.report.failures]
    out = root / "rbs-out/bin/pkg"
    assert (out / "g_files/a.txt").read_text() == "alpha\n"
    assert (out / "g_files/sub/z.txt").read_text() == "deep\n"
    # One argument per file, in path order, with format_each and before_each.
    assert (out / "c.txt").read_text() == (
        f"in={DIR}/a.txt alpha\nin={DIR}/b.txt beta\nin={DIR}/sub/z.txt deep\n"
    )
    # Unchanged: nothing runs. A changed input reruns both; the same bytes come back.
    again = run_build(root, ["//pkg:c"], options=BuildOptions(jobs=2))
    assert again.ok and again.up_to_date
    (root / "pkg/b.txt").write_text("BETA\n")
    third = run_build(root, ["//pkg:c"], options=BuildOptions(jobs=2))
    assert third.ok and third.report.executed == 2
    assert "in=" + DIR + "/b.txt BETA" in (out / "c.txt").read_text()
    # After `rbs clean`-like loss of rbs-out/ and the memo, the action cache answers.
    import shutil

    shutil.rmtree(root / "rbs-out")
    shutil.rmtree(root / ".rbs/state", ignore_errors=True)
    fourth = run_build(root, ["//pkg:c"], options=BuildOptions(jobs=2))
    assert fourth.ok and fourth.report.executed == 0 and fourth.report.cache_hits == 2
    assert (out / "g_files/sub/z.txt").read_text() == "deep\n"


def test_tree_artifact_in_a_tests_runfiles(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    res = run_build(root, ["//pkg:t"], options=BuildOptions(jobs=2), mode="test")
    assert res.ok
    ((code, _cached, log),) = res.report.tests.values()
    assert code == 0 and b"alpha\ndeep\n" in log, log
    tree = root / "rbs-out/bin/pkg/t.runfiles/__main__/pkg/g_files"
    assert (tree / "sub/z.txt").read_text() == "deep\n"


def test_an_action_that_leaves_no_directory_fails(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                "    d = ctx.actions.declare_directory('d')\n"
                "    ctx.actions.run_shell(outputs = [d], command = 'rmdir ' + d.path)\n"
                "    return [DefaultInfo(files = depset([d]))]\n"
                "r = rule(implementation = _impl)\n"
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x")\n',
        }
    )
    res = run_build(root, ["//pkg:x"], options=BuildOptions(jobs=2))
    assert not res.ok
    assert "did not create its declared output(s): d" in res.report.failures[0].message


def test_write_to_a_directory_is_refused(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                "    d = ctx.actions.declare_directory('d')\n"
                "    ctx.actions.write(d, 'x')\n"
                "r = rule(implementation = _impl)\n"
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x")\n',
        }
    )
    with pytest.raises(BuildError, match=r"ctx.actions.write: the output 'pkg/d' is a directory"):
        load_and_analyze(root, ["//pkg:x"])
