"""A worker daemon restarted under running jobs: the run supervisor keeps them, the next
daemon re-attaches, and each job ends as its first attempt with every log line once."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest
from jobs_harness import JobCluster, spawn_rbs, stop_process, wait_for, wait_ready

from rbs.executor.lease import group_alive
from rbs.scheduler.config import SchedulerConfig

pytestmark = pytest.mark.chaos

# Long enough for a daemon restart on a loaded host to fit in the lease (40 s).
JOBS = SchedulerConfig(heartbeat_timeout=60.0, validate=True)
LINES = 20


def _worker(
    cluster: JobCluster, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    ready, log = tmp_path / "w1.ready", tmp_path / "w1.log"
    with contextlib.suppress(FileNotFoundError):
        ready.unlink()
    args = ["remote", "worker", "--server", cluster.address, "--work-dir", str(tmp_path / "w1")]
    proc = spawn_rbs([*args, "--job-slots", "2", "--ready-file", str(ready), *extra], log)
    return proc, str(wait_ready(proc, ready, log)["worker_id"])


def _script(tmp_path: Path) -> str:
    """Counts its starts, writes lines 1-10, waits for the gate, writes 11-20."""
    half, gate, done = tmp_path / "half", tmp_path / "gate", tmp_path / "done"
    return (
        f"echo start >> {tmp_path / 'starts'}; echo $$ > {tmp_path / 'pid'}; "
        f"i=0; while [ $i -lt {LINES} ]; do i=$((i + 1)); echo line$i; "
        f"if [ $i = 10 ]; then touch {half}; "
        f"while [ ! -e {gate} ]; do sleep 0.02; done; fi; done; touch {done}"
    )


def _supervisor_pid(tmp_path: Path) -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        return int((tmp_path / "w1" / "supervisor.pid").read_text())
    return None


def _stop_supervisor(tmp_path: Path) -> None:
    pid = _supervisor_pid(tmp_path)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _check_one_attempt(cluster: JobCluster, job: str, tmp_path: Path) -> None:
    info = cluster.wait(job, timeout=90)
    assert info.state == "COMPLETED", info.raw
    assert info.raw["attempts"] == 1
    assert (tmp_path / "starts").read_text() == "start\n"  # it ran once
    lines = list(cluster.client().logs(job))
    out = [x.text for x in lines if x.stream == "out"]
    assert out == [f"line{i}" for i in range(1, LINES + 1)]  # every line, once, in order
    assert {x.attempt for x in lines} == {1}
    seqs = [x.seq for x in lines]
    assert len(seqs) == len(set(seqs))


@pytest.mark.parametrize("how", ["kill-9", "sigterm-leave-running"])
def test_a_restarted_daemon_re_attaches_to_its_running_job(tmp_path: Path, how: str) -> None:
    cluster = JobCluster(tmp_path / "server", jobs=JOBS)
    w1, w1_id = _worker(cluster, tmp_path, "--leave-jobs-running")
    try:
        job = cluster.client().submit(["sh", "-c", _script(tmp_path)])
        wait_for("the job's first half", (tmp_path / "half").exists, timeout=60)
        supervisor = _supervisor_pid(tmp_path)
        assert supervisor is not None
        if how == "kill-9":
            w1.kill()
        else:
            w1.terminate()
        w1.wait(30)
        assert (tmp_path / "done").exists() is False
        w1, again = _worker(cluster, tmp_path)
        assert again == w1_id
        assert _supervisor_pid(tmp_path) == supervisor  # the same one, not a fresh one
        (tmp_path / "gate").touch()
        _check_one_attempt(cluster, job, tmp_path)
    finally:
        stop_process(w1)
        _stop_supervisor(tmp_path)
        cluster.stop()


def test_an_exit_while_the_daemon_was_down_is_reported_after_the_restart(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server", jobs=JOBS)
    w1, _ = _worker(cluster, tmp_path)
    try:
        job = cluster.client().submit(["sh", "-c", _script(tmp_path)])
        wait_for("the job's first half", (tmp_path / "half").exists, timeout=60)
        w1.kill()
        w1.wait(30)
        (tmp_path / "gate").touch()
        wait_for("the job to end with no daemon", (tmp_path / "done").exists, timeout=60)
        assert cluster.client().show(job).state == "RUNNING"  # nobody told the server yet
        w1, _ = _worker(cluster, tmp_path)
        _check_one_attempt(cluster, job, tmp_path)
    finally:
        stop_process(w1)
        _stop_supervisor(tmp_path)
        cluster.stop()


def test_a_plain_sigterm_still_stops_the_jobs(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server", jobs=JOBS)
    w1, _ = _worker(cluster, tmp_path)
    try:
        cluster.client().submit(["sh", "-c", _script(tmp_path)])
        wait_for("the job's first half", (tmp_path / "half").exists, timeout=60)
        supervisor = _supervisor_pid(tmp_path)
        assert supervisor is not None
        w1.terminate()
        assert w1.wait(30) == 0
        # The supervisor stopped the job and went away with it.
        wait_for("the supervisor to exit", lambda: not _alive(supervisor), timeout=30)
        assert not group_alive(int((tmp_path / "pid").read_text()))
        assert (tmp_path / "starts").read_text() == "start\n"
    finally:
        stop_process(w1)
        _stop_supervisor(tmp_path)
        cluster.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_a_killed_worker_not_restarted_is_requeued_once_never_alongside(tmp_path: Path) -> None:
    # Loss is detected fast here (3 s): the lease (2 s) stops the orphaned run first.
    cluster = JobCluster(tmp_path / "server", jobs=SchedulerConfig(heartbeat_timeout=3.0))
    lock, overlaps, attempts = tmp_path / "lock", tmp_path / "overlaps", tmp_path / "attempts"
    w1, _ = _worker(cluster, tmp_path)
    try:
        # Each attempt holds an exclusive lock for its whole life (released by the kernel
        # when its last process dies): one that finds it held runs alongside another.
        script = (
            f'exec 9>{lock}; flock -n 9 || {{ echo "$RBS_ATTEMPT" >> {overlaps}; exit 1; }}; '
            f'echo "$RBS_ATTEMPT" >> {attempts}; '
            f'if [ "$RBS_ATTEMPT" = 1 ]; then exec sleep 60; fi; echo second run'
        )
        job = cluster.client().submit(["sh", "-c", script])
        wait_for("attempt 1 to run", attempts.exists, timeout=60)
        cluster.add_worker(tmp_path / "w2")
        w1.kill()
        w1.wait(30)
        info = cluster.wait(job, timeout=90)
        assert info.state == "COMPLETED", info.raw
        assert info.raw["attempts"] == 2
        assert attempts.read_text().split() == ["1", "2"]  # requeued once
        assert not overlaps.exists()  # never two attempts alive at once
        out = [(x.attempt, x.text) for x in cluster.client().logs(job) if x.stream == "out"]
        assert out == [(2, "second run")]
    finally:
        stop_process(w1)
        _stop_supervisor(tmp_path)
        cluster.stop()


def test_a_killed_supervisor_fails_its_runs_and_a_fresh_one_takes_over(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server", jobs=JOBS)
    w1, _ = _worker(cluster, tmp_path)
    try:
        client = cluster.client()
        job = client.submit(["sh", "-c", _script(tmp_path)])
        wait_for("the job's first half", (tmp_path / "half").exists, timeout=60)
        old = _supervisor_pid(tmp_path)
        assert old is not None
        os.kill(old, signal.SIGKILL)
        info = cluster.wait(job, timeout=90)
        assert info.state == "FAILED", info.raw
        sys_lines = [x.text for x in client.logs(job) if x.stream == "sys"]
        assert any("run supervisor exited" in t for t in sys_lines), sys_lines
        # A fresh supervisor, which killed what the old one left, runs the next job.
        wait_for("a fresh supervisor", lambda: _supervisor_pid(tmp_path) not in (None, old))
        wait_for(
            "the old job's processes to be gone",
            lambda: not group_alive(int((tmp_path / "pid").read_text())),
            timeout=30,
        )
        again = client.submit(["echo", "again"])
        assert cluster.wait(again, timeout=60).state == "COMPLETED"
        assert w1.poll() is None  # the daemon carried on
    finally:
        stop_process(w1)
        _stop_supervisor(tmp_path)
        cluster.stop()
