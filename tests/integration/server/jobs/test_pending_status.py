"""`rbs job submit --wait` and `-f` show why a job waits, on a terminal only.

One worker, made full by a first job; a second one waits behind it. On a terminal the
waiting command shows `job N: PENDING:<reason>` on one line it rewrites, then erases it;
in a pipe the same command writes only the final line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from jobs_harness import JobCluster, wait_for
from ptyrun import PtyRbs, rbs_env

from rbs.client.jobs import JobsClient

pytestmark = pytest.mark.timeout(600)
WAIT = ("--cpus", "4", "--wait", "--", "true")


def _fill(client: JobsClient, tmp_path: Path) -> str:
    """A job that takes every CPU of the one worker, running once this returns."""
    started = tmp_path / "started"
    job = client.submit(["sh", "-c", f"touch {started}; sleep 300"], cpus="4")
    wait_for("the filling job to start", started.exists, timeout=120)
    return job


def _pending_job(client: JobsClient, blocker: str) -> str | None:
    """The id of the job waiting behind `blocker`, once there is one."""
    waiting = [j.job_id for j in client.list_jobs(states=["PENDING"]) if j.job_id != blocker]
    return waiting[0] if waiting else None


def _run(
    cmd: list[str], cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> tuple[bytes, bytes]:
    """(stdout, terminal bytes) of `rbs job submit CMD` run while the worker is full."""
    blocker = _fill(client, tmp_path)
    env = rbs_env(tmp_path / "home")
    tty = PtyRbs(["job", "submit", "--server", cluster.address, "--cpus", "4", *cmd], env)
    try:
        seen = tty.read_until(lambda b: b"PENDING:" in b, timeout=180)
        assert b"\r\x1b[K" in seen  # drawn as a status line, rewritten in place
        client.cancel([blocker])
        rc, out, seen = tty.finish(timeout=240)
    finally:
        tty.close()
    assert rc == 0, seen
    return out, seen


def test_wait_on_a_terminal_shows_the_pending_reason_then_erases_it(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    _, raw = _run(["--wait", "--", "true"], cluster, client, tmp_path)
    seen = raw.decode()
    status = seen[seen.index("PENDING:") :].split("\r")[0]
    assert status.startswith("PENDING:") and len(status) > len("PENDING:")  # a reason
    after = seen[seen.rindex("PENDING:") :]
    assert "\r\x1b[K" in after  # erased before the final line
    assert seen.rstrip().endswith(": COMPLETED")


def test_follow_on_a_terminal_shows_the_pending_reason_then_the_log(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    out, seen = _run(["-f", "--", "echo", "hello-from-the-job"], cluster, client, tmp_path)
    assert b"hello-from-the-job" in out  # the log, on stdout, after the status line went
    text = seen.decode()
    assert text.index("PENDING:") < text.rindex("COMPLETED")
    assert seen.rstrip().endswith(b": COMPLETED")


def test_wait_in_a_pipe_writes_no_status_line(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    blocker = _fill(client, tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rbs", "job", "submit", "--server", cluster.address, *WAIT],
        env=rbs_env(tmp_path / "home"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        waiting = wait_for("the second job to wait", lambda: _pending_job(client, blocker), 180)
        # It has waited through more than one status refresh before the blocker goes.
        wait_for("a reason", lambda: client.show(waiting).reason, timeout=60)
        client.cancel([blocker])
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    assert proc.returncode == 0, err
    assert out.decode().strip() == waiting
    assert err.decode() == f"job {waiting}: COMPLETED\n"
