"""A worker killed with SIGKILL: the job restarts elsewhere, its log says so, and show lists both attempts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from jobs_harness import JobCluster, kill_group, spawn_worker, stop_process, wait_for, wait_ready

from rbs.scheduler.config import SchedulerConfig

pytestmark = pytest.mark.chaos


def test_a_killed_workers_job_restarts_with_a_line_saying_why(tmp_path: Path) -> None:
    cluster = JobCluster(
        tmp_path / "server", jobs=SchedulerConfig(heartbeat_timeout=3.0, validate=True)
    )
    pid_file = tmp_path / "pid"
    w1, ready1, log1 = spawn_worker(cluster.address, tmp_path, "w1")
    w2 = None
    try:
        w1_id = wait_ready(w1, ready1, log1)["worker_id"]
        client = cluster.client()
        script = (
            f'if [ "$RBS_ATTEMPT" = 1 ]; then echo $$ > {pid_file}.tmp; '
            f"mv {pid_file}.tmp {pid_file}; exec sleep 120; fi; echo second run"
        )
        job = client.submit(["sh", "-c", script])
        wait_for("the job to run", pid_file.exists)
        os.kill(w1.pid, signal.SIGKILL)
        w1.wait(timeout=30)
        wait_for("the killed worker to be lost", lambda: w1_id not in cluster.live_workers())
        w2, ready2, log2 = spawn_worker(cluster.address, tmp_path, "w2")
        w2_id = wait_ready(w2, ready2, log2)["worker_id"]
        info = cluster.wait(job, timeout=120)
        assert info.state == "COMPLETED", info.raw
        sys_lines = [ln.text for ln in client.logs(job) if ln.stream.value == "sys"]
        expected = f"worker {w1_id} lost; restarting on another worker (attempt 2 of 11)"
        assert expected in sys_lines, sys_lines
        shown = client.show(job).raw
        history = [(a["attempt"], a["state"], a["reason"], a["workers"]) for a in shown["history"]]
        assert history == [
            (1, "NODE_FAIL", f"worker_lost {w1_id}", [w1_id]),
            (2, "COMPLETED", None, [w2_id]),
        ]
    finally:
        kill_group(pid_file)
        stop_process(w1)
        if w2 is not None:
            stop_process(w2)
        cluster.stop()
