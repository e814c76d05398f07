"""Tree artifacts with remote execution: the worker returns the directory as a REAPI Tree,
a later action on the cluster gets it as input, and a second workspace hits the cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from exec_cluster import Cluster

DEFS = """
def _gen_impl(ctx):
    d = ctx.actions.declare_directory(ctx.label.name + "_files")
    ctx.actions.run_shell(outputs = [d], command = "mkdir -p %s/sub && echo a > %s/a.txt && echo z > %s/sub/z.txt" % (d.path, d.path, d.path))
    return [DefaultInfo(files = depset([d]))]

gen = rule(implementation = _gen_impl)

def _cat_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    args = ctx.actions.args()
    args.add(out)
    args.add_all(ctx.files.srcs)
    ctx.actions.run_shell(outputs = [out], inputs = ctx.files.srcs, arguments = [args],
        command = 'o=$1; shift; for f in "$@"; do echo "$f $(cat $f)"; done > $o')
    return [DefaultInfo(files = depset([out]))]

cat = rule(implementation = _cat_impl, attrs = {"srcs": attr.label_list()})
"""
FILES = {
    "WORKSPACE": "",
    "pkg/defs.bzl": DEFS,
    "pkg/BUILD": 'load(":defs.bzl", "gen", "cat")\ngen(name = "g")\ncat(name = "c", srcs = [":g"])\n',
}
WANT = (
    "bazel-out/k8-fastbuild/bin/pkg/g_files/a.txt a\n"
    "bazel-out/k8-fastbuild/bin/pkg/g_files/sub/z.txt z\n"
)


def rbs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=dict(os.environ),
    )


def _ws(root: Path) -> Path:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.timeout(180)
def test_tree_artifact_runs_remotely_and_is_cached(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path).start()
    try:
        remote = ("--remote", f"127.0.0.1:{cluster.port}")
        one = _ws(tmp_path / "one")
        r = rbs(one, "build", "--plain", "//pkg:c", *remote)
        assert r.returncode == 0, r.stderr
        assert "2 run" in r.stderr
        assert (one / "rbs-out/bin/pkg/c.txt").read_text() == WANT
        assert (one / "rbs-out/bin/pkg/g_files/sub/z.txt").read_text() == "z\n"
        two = _ws(tmp_path / "two")
        r = rbs(two, "build", "--plain", "//pkg:c", *remote)
        assert r.returncode == 0, r.stderr
        assert "0 run, 2 cache hits" in r.stderr
        assert (two / "rbs-out/bin/pkg/c.txt").read_text() == WANT
        assert (two / "rbs-out/bin/pkg/g_files/a.txt").read_text() == "a\n"
    finally:
        cluster.stop()
