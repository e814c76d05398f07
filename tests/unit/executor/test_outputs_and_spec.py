"""Declared outputs (normalizing, escapes refused, collection) and JobSpec validation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rbs.cas.memory import MemoryStore
from rbs.executor.jobspec import JobOutcome, JobSpec
from rbs.executor.outputs import (
    OutputKind,
    OutputPathError,
    check_declared,
    collect_outputs,
    store_outputs,
)
from rbs.model import Digest, JobState


def test_declared_paths_are_normalized() -> None:
    assert check_declared(["a/./b/", "a/b", "c"]) == ("a/b", "c")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "is absolute"),
        ("../x", "uses '..'"),
        ("a/../../x", "uses '..'"),
        (".", "names the work folder itself"),
        ("", "non-empty"),
    ],
)
def test_declared_paths_that_could_escape_are_refused(path: str, message: str) -> None:
    with pytest.raises(OutputPathError, match=message) as e:
        check_declared([path])
    assert repr(path) in str(e.value)


def test_collect_found_missing_and_rejected(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    (wd / "out" / "sub").mkdir(parents=True)
    (wd / "out" / "sub" / "f").write_text("x")
    (wd / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(wd / "run.sh", 0o755)
    (wd / "inner").symlink_to("run.sh")
    (wd / "escape").symlink_to("/etc/passwd")
    (tmp_path / "secret").write_text("s")
    (wd / "escdir").symlink_to(tmp_path)
    (wd / "dangling").symlink_to("nowhere")
    os.mkfifo(wd / "fifo")
    result = collect_outputs(
        wd,
        ["out", "run.sh", "inner", "escape", "escdir/secret", "dangling", "fifo", "none"],
    )
    found = {f.declared: (f.kind, f.executable, f.path) for f in result.found}
    assert found == {
        "out": (OutputKind.DIRECTORY, False, wd / "out"),
        "run.sh": (OutputKind.FILE, True, wd / "run.sh"),
        "inner": (OutputKind.FILE, True, wd / "run.sh"),
    }
    assert result.missing == ("none",)
    reasons = {r.declared: r.reason for r in result.rejected}
    assert set(reasons) == {"escape", "escdir/secret", "dangling", "fifo"}
    assert "'escape' resolves to /etc/passwd, outside the job's work folder" in reasons["escape"]
    assert "outside" in reasons["escdir/secret"]
    assert "does not exist" in reasons["dangling"]
    assert "neither a regular file nor a folder" in reasons["fifo"]


def test_store_outputs_puts_files_and_trees(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"hello")
    (tmp_path / "f").write_bytes(b"data")
    store = MemoryStore()
    stored = {s.declared: s for s in store_outputs(store, collect_outputs(tmp_path, ["d", "f"]))}
    assert stored["f"].digest == Digest.of(b"data")
    assert store.get(stored["f"].digest) == b"data"
    assert stored["d"].kind is OutputKind.DIRECTORY
    assert store.contains(stored["d"].digest) and store.contains(Digest.of(b"hello"))


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"job_id": "j1", "argv": ("true",), "workdir": Path("/tmp")}
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


def test_final_env_adds_ids_and_gpus_without_inheriting() -> None:
    env = spec(env={"A": "1"}, task_id="3", attempt=2, gpu_ids=("0", "2")).final_env()
    assert env == {
        "A": "1",
        "RBS_JOB_ID": "j1",
        "RBS_TASK_ID": "3",
        "RBS_ATTEMPT": "2",
        "CUDA_VISIBLE_DEVICES": "0,2",
        "NVIDIA_VISIBLE_DEVICES": "0,2",
    }
    hidden = spec(gpu_ids=()).final_env()
    assert hidden["CUDA_VISIBLE_DEVICES"] == "" and hidden["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "CUDA_VISIBLE_DEVICES" not in spec().final_env()
    assert spec(task_id="3", attempt=2).key == "j1.3.a2"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"argv": ()}, "argv is empty"),
        ({"job_id": "a b"}, "job id 'a b'"),
        ({"env": {"A=B": "x"}}, "bad environment entry 'A=B'"),
        ({"attempt": 0}, "attempt counts from 1"),
        ({"time_limit_s": 0}, "time limit must be a positive"),
        ({"time_limit_s": float("inf")}, "time limit must be a positive"),
        ({"grace_s": -1}, "grace period"),
        ({"memory_bytes": 100}, "below 1 MiB"),
        ({"gpu_ids": ("0,1",)}, "bad GPU ids"),
        ({"outputs": ("../x",)}, "uses '..'"),
    ],
)
def test_bad_specs_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**kw)


def test_outcome_describe() -> None:
    assert JobOutcome(state=JobState.TIMEOUT, signal=9, ended_at=0).describe() == (
        "TIMEOUT (killed by SIGKILL)"
    )
    assert JobOutcome(state=JobState.FAILED, exit_code=2, ended_at=0).describe() == (
        "FAILED (exit code 2)"
    )
