"""A worker daemon frozen (SIGSTOP): lost after `[jobs] heartbeat_timeout`, its runs stopped
by their lapsed lease before the server runs them again."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from jobs_harness import JobCluster, kill_group, spawn_worker, stop_process, wait_for, wait_ready

from rbs.executor.lease import group_alive
from rbs.scheduler.config import SchedulerConfig
from rbs.server.job_driver import TICK_S

pytestmark = pytest.mark.chaos

TIMEOUT_S = 3.0


def _group_gone(pid: int) -> bool:
    return not group_alive(pid)


def test_frozen_worker_is_lost_within_the_jobs_heartbeat_timeout(tmp_path: Path) -> None:
    # The hub's own timeout for build actions stays at its default (30 s): the job
    # scheduler must not wait for it.
    cluster = JobCluster(
        tmp_path / "server", jobs=SchedulerConfig(heartbeat_timeout=TIMEOUT_S, validate=True)
    )
    pid_file = tmp_path / "pid"
    attempts = tmp_path / "attempts"
    w1, ready, log = spawn_worker(cluster.address, tmp_path)
    stopped = False
    try:
        w1_id = wait_ready(w1, ready, log)["worker_id"]
        client = cluster.client()
        script = (
            f'echo "$RBS_ATTEMPT" >> {attempts}; '
            f'if [ "$RBS_ATTEMPT" = 1 ]; then echo $$ > {pid_file}.tmp; '
            f"mv {pid_file}.tmp {pid_file}; exec sleep 60; fi; echo second run"
        )
        job = client.submit(["sh", "-c", script])
        wait_for("the job to run", pid_file.exists)
        first_pid = int(pid_file.read_text())
        os.kill(w1.pid, signal.SIGSTOP)
        stopped = True
        frozen_at = time.monotonic()
        wait_for("the frozen worker to be lost", lambda: w1_id not in cluster.live_workers())
        took = time.monotonic() - frozen_at
        # Heard at most one heartbeat interval (timeout / 3) before the freeze; lost one
        # timeout after that, noticed at the next tick (plus polling and a loaded host).
        assert TIMEOUT_S * 2 / 3 - TICK_S <= took <= TIMEOUT_S + TICK_S + 1.0, took
        os.kill(w1.pid, signal.SIGCONT)
        stopped = False
        # Awake, its stream closed by the server, it registers afresh: the run the
        # scheduler gave up is stopped there and the job runs again as attempt 2.
        info = cluster.wait(job)
        assert info.state == "COMPLETED", info.raw
        assert attempts.read_text().split() == ["1", "2"]
        wait_for("attempt 1's process group to be gone", lambda: _group_gone(first_pid))
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w1.pid, signal.SIGCONT)
        kill_group(pid_file)
        stop_process(w1)
        cluster.stop()


def test_a_frozen_workers_job_is_dead_before_its_requeued_copy_starts(tmp_path: Path) -> None:
    cluster = JobCluster(
        tmp_path / "server", jobs=SchedulerConfig(heartbeat_timeout=TIMEOUT_S, validate=True)
    )
    pid_file = tmp_path / "pid"
    stamps = tmp_path / "stamps"
    w1, ready, log = spawn_worker(cluster.address, tmp_path)
    stopped = False
    try:
        wait_ready(w1, ready, log)
        client = cluster.client()
        # Each attempt stamps the file every 20 ms; attempt 2 ends after 50 stamps.
        script = (
            f'if [ "$RBS_ATTEMPT" = 1 ]; then echo $$ > {pid_file}.tmp; '
            f"mv {pid_file}.tmp {pid_file}; fi; n=0; "
            f'while [ "$RBS_ATTEMPT" = 1 ] || [ $n -lt 50 ]; do '
            f'echo "$RBS_ATTEMPT $(date +%s.%N)" >> {stamps}; n=$((n+1)); sleep 0.02; done'
        )
        job = client.submit(["sh", "-c", script])
        wait_for("attempt 1 to stamp", lambda: stamps.exists() and pid_file.exists())
        first_pid = int(pid_file.read_text())
        cluster.add_worker(tmp_path / "w2", job_slots=1)
        os.kill(w1.pid, signal.SIGSTOP)
        stopped = True
        frozen_at = time.time()
        info = cluster.wait(job)
        assert info.state == "COMPLETED", info.raw
        assert info.raw["attempts"] == 2
        done_at = time.time()
        rows = [line.split() for line in stamps.read_text().splitlines()]
        first = [float(t) for a, t in rows if a == "1"]
        second = [float(t) for a, t in rows if a == "2"]
        assert len(second) == 50
        assert max(first) < min(second), (frozen_at, max(first), min(second), done_at)
        # Stopped by the watchdog: its daemon, still frozen, cannot have done it.
        assert _group_gone(first_pid)
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(w1.pid, signal.SIGCONT)
        kill_group(pid_file)
        stop_process(w1)
        cluster.stop()
