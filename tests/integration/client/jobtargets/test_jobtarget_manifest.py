"""`rbs build` of a job target: the manifest file, its determinism, and the stored input tree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from jobtarget_ws import CAT_JOB, LOAD, write_ws

from rbs.build.driver import BuildOptions, run_build
from rbs.build.labels import Label
from rbs.cas.disk import DiskStore
from rbs.cas.tree import materialize, walk_tree
from rbs.wire.manifest import manifest_from_json, manifest_to_json

JOB = Label(package="app", name="job")


def build(root: Path, *patterns: str) -> dict[Label, str]:
    result = run_build(root, list(patterns) or ["//app:job"], options=BuildOptions(jobs=2))
    assert result.ok, [f.message for f in result.report.failures]
    return result.manifests


def test_build_writes_the_canonical_manifest_and_stores_a_runnable_tree(tmp_path: Path) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    assert build(root) == {JOB: "rbs-out/app/job.job.json"}
    text = (root / "rbs-out/app/job.job.json").read_text()
    m = manifest_from_json(text)
    assert text == manifest_to_json(m)  # exactly the canonical form, no newline
    assert m.command == ("./app/show", "a1")
    assert m.input_root is not None
    store = DiskStore(root / ".rbs" / "cas")
    files = {p: e for p, e in walk_tree(store, m.input_root) if e is not None}
    assert set(files) == {
        "app/show",
        "app/show.runfiles/ws/app/show",
        "app/show.runfiles/ws/app/show.sh",
        "app/data.txt",
    }
    assert files["app/show"].executable and not files["app/data.txt"].executable
    # The tree runs as the job would: the command in the materialized folder.
    work = tmp_path / "work"
    materialize(store, m.input_root, work)
    out = subprocess.run(
        list(m.command),
        cwd=work,
        env={**dict(m.env), "PATH": os.environ["PATH"]},
        text=True,
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout
    assert out == "hello args=a1 attempt=\nthe data\n"


def test_manifest_is_byte_identical_after_a_clean_rebuild(tmp_path: Path) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    build(root)
    path = root / "rbs-out/app/job.job.json"
    first = path.read_bytes()
    stamp = path.stat().st_mtime_ns
    assert run_build(root, ["//app:job"], options=BuildOptions()).up_to_date
    assert path.stat().st_mtime_ns == stamp
    shutil.rmtree(root / "rbs-out")
    shutil.rmtree(root / ".rbs")
    build(root)
    assert path.read_bytes() == first
    # Another checkout of the same sources gives the same bytes too.
    other = write_ws(tmp_path / "other", CAT_JOB)
    build(other)
    assert (other / "rbs-out/app/job.job.json").read_bytes() == first


def test_data_changes_reach_the_manifest_and_a_deleted_one_is_rewritten(tmp_path: Path) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    build(root)
    path = root / "rbs-out/app/job.job.json"
    before = manifest_from_json(path.read_text())
    # Only the job reads data.txt (no action does): the no-op check must still see it.
    (root / "app/data.txt").write_text("other data\n")
    build(root)
    after = manifest_from_json(path.read_text())
    assert after.input_root != before.input_root
    assert after.command == before.command
    path.unlink()
    build(root)
    assert manifest_from_json(path.read_text()) == after


def test_root_package_and_several_targets(tmp_path: Path) -> None:
    root = write_ws(
        tmp_path / "ws",
        {
            "BUILD": LOAD
            + 'sh_binary(name = "run", srcs = ["run.sh"])\n'
            + 'batch_job(name = "top", binary = ":run")\n'
            + 'ml_training_job(name = "big", binary = ":run", nodes = 3)\n',
            "run.sh": "#!/bin/sh\necho run\n",
        },
    )
    written = build(root, "//:all")
    assert written == {
        Label(package="", name="big"): "rbs-out/big.job.json",
        Label(package="", name="top"): "rbs-out/top.job.json",
    }
    big = manifest_from_json((root / "rbs-out/big.job.json").read_text())
    top = manifest_from_json((root / "rbs-out/top.job.json").read_text())
    assert big.nodes == 3 and top.nodes == 1
    assert big.command == top.command == ("./run",)
    assert big.input_root == top.input_root
