"""The worker's work dir full (a small tmpfs mounted as it): jobs' output is held back,
the jobs waiting to write, never dropped or failed, and all recovers once space is freed,
without a restart."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_harness import JobCluster, spawn_rbs, stop_process, wait_for, wait_ready

from rbs.scheduler.config import SchedulerConfig

pytestmark = pytest.mark.chaos

LINES = 3000  # about 300 KB: more than the pipes and the free room hold


@pytest.fixture
def small_work_dir(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "w1"
    work.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs as the worker's work dir needs root")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(work)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield work
    finally:
        subprocess.run(["umount", "-l", str(work)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Write a file until the filesystem is full."""
    filler = folder / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        for _ in range(10_000):
            f.write(b"\0" * 65536)
            f.flush()
    return filler


def test_a_full_work_dir_holds_output_back_and_recovers(
    tmp_path: Path, small_work_dir: Path
) -> None:
    cluster = JobCluster(tmp_path / "server", jobs=SchedulerConfig(heartbeat_timeout=60.0))
    ready, log = tmp_path / "w1.ready", tmp_path / "w1.log"
    args = ["remote", "worker", "--server", cluster.address, "--work-dir", str(small_work_dir)]
    w1 = spawn_rbs([*args, "--job-slots", "2", "--ready-file", str(ready)], log)
    supervisor: int | None = None
    try:
        wait_ready(w1, ready, log)
        supervisor = int((small_work_dir / "supervisor.pid").read_text())
        client = cluster.client()
        half, gate = tmp_path / "half", tmp_path / "gate"
        pad = "x" * 90
        script = (
            f"echo start >> {tmp_path / 'starts'}; echo first; touch {half}; "
            f"while [ ! -e {gate} ]; do sleep 0.02; done; "
            f'i=0; while [ $i -lt {LINES} ]; do i=$((i + 1)); echo "$i {pad}"; done'
        )
        job = client.submit(["sh", "-c", script])
        wait_for("the job to run", half.exists, timeout=60)
        filler = _fill(small_work_dir)
        gate.touch()
        # A job that arrives now runs, its output held back too: it ends only once its
        # last line is in its log.
        late = client.submit(["echo", "late"])
        wait_for("the late job to be started", lambda: client.show(late).state == "RUNNING")
        info = client.wait(late, timeout=2)
        assert (info.state, client.show(job).state) == ("RUNNING", "RUNNING")  # not failed
        filler.unlink()
        info = cluster.wait(late, timeout=120)
        assert info.state == "COMPLETED", info.raw
        assert [x.text for x in client.logs(late) if x.stream == "out"] == ["late"]
        info = cluster.wait(job, timeout=120)
        assert info.state == "COMPLETED", info.raw
        assert info.raw["attempts"] == 1
        assert (tmp_path / "starts").read_text() == "start\n"
        lines = list(client.logs(job))
        out = [x.text for x in lines if x.stream == "out"]
        assert out == ["first"] + [f"{i} {pad}" for i in range(1, LINES + 1)]  # none lost
        assert any("held back" in x.text for x in lines if x.stream == "sys")
        # Space is back: the next job runs, with no restart.
        again = client.submit(["echo", "again"])
        info = cluster.wait(again, timeout=60)
        assert info.state == "COMPLETED", info.raw
        assert [x.text for x in client.logs(again) if x.stream == "out"] == ["again"]
    finally:
        stop_process(w1)
        if supervisor is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(supervisor, 9)
        cluster.stop()
