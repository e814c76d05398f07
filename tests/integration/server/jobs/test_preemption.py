"""Preemption against `rbs remote serve` with two workers: the victim saves its
checkpoint folder, goes back to PENDING, and resumes from it on attempt 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from jobs_harness import JobCluster, spawn_rbs, stop_process, wait_for, wait_ready

from rbs.scheduler.config import SchedulerConfig
from rbs.server.cluster import pick_port_pair

CONFIG = """
[jobs]
queues = [
  { name = "low" },
  { name = "high", priority_weight = 100, preempts = ["low"] },
]
"""

# Counts steps into ckpt/step; a later attempt that finds the file reports it and ends.
TRAIN = (
    "mkdir -p ckpt; "
    'if [ -f ckpt/step ]; then echo "resumed at $(cat ckpt/step)"; exit 0; fi; '
    "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo $i > ckpt/step; echo step $i; "
    "sleep 0.1; done"
)


def test_a_preempted_job_resumes_from_its_checkpoint_on_attempt_2(tmp_path: Path) -> None:
    port = pick_port_pair("127.0.0.1")
    config = tmp_path / "server.toml"
    config.write_text(CONFIG)
    ready = tmp_path / "server.ready"
    log = tmp_path / "server.log"
    serve = ["remote", "serve", "--config", str(config), "--port", str(port)]
    serve += ["--data-dir", str(tmp_path / "data"), "--ready-file", str(ready)]
    server = spawn_rbs(serve, log)
    cluster = JobCluster(tmp_path / "unused", port=port, serve=False, jobs=SchedulerConfig())
    try:
        wait_ready(server, ready, log)
        for name in ("w1", "w2"):
            cluster.add_worker(tmp_path / name, job_slots=1, cpus=1, name=name)
        client = cluster.client()
        train = client.submit(
            ["sh", "-c", TRAIN], queue="low", preemptible=True, checkpoint_dir="ckpt", name="train"
        )
        blocker = client.submit(["sleep", "600"], queue="low", name="blocker")

        def steps() -> list[int]:
            return [
                int(x.text.split()[1])
                for x in client.logs(train)
                if x.stream == "out" and x.attempt == 1 and x.text.startswith("step ")
            ]

        wait_for("train to write a few steps", lambda: len(steps()) >= 3, timeout=120)
        wait_for(
            "blocker to run",
            lambda: client.show(blocker).state == "RUNNING",
            timeout=120,
        )
        urgent = client.submit(["echo", "urgent"], queue="high", name="urgent")
        info = cluster.wait(urgent, timeout=180)
        assert info.state == "COMPLETED"
        done = cluster.wait(train, timeout=180)
        assert done.state == "COMPLETED"
        lines = list(client.logs(train))
        before = steps()
        resumed = [x.text for x in lines if x.stream == "out" and x.attempt == 2]
        assert len(resumed) == 1 and resumed[0].startswith("resumed at ")
        at = int(resumed[0].removeprefix("resumed at "))
        assert before[-1] <= at <= before[-1] + 1  # the checkpoint the victim left
        sys_1 = [x.text for x in lines if x.stream == "sys" and x.attempt == 1]
        assert any(f"preempted for job {urgent}" in t for t in sys_1), sys_1
        assert client.show(blocker).state == "RUNNING"  # not preemptible: untouched
        env = {**os.environ, "RBS_REMOTE": cluster.address, "RBS_HOME": str(tmp_path / "home")}
        shown = subprocess.run(
            [sys.executable, "-m", "rbs", "job", "show", train],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert shown.returncode == 0, shown.stderr
        assert re.search(rf"preempted for job {urgent} by \S+ at ", shown.stdout), shown.stdout
        client.cancel([blocker])
        assert cluster.wait(blocker, timeout=120).state == "CANCELLED"
    finally:
        cluster.stop()
        stop_process(server)


HELD_CONFIG = """
[jobs]
hold_depth = 0
queues = [
  { name = "low", preempt_mode = "cancel" },
  { name = "high", priority_weight = 100, preempts = ["low"] },
]
"""

# A victim that takes a few seconds to leave after SIGTERM, as a checkpointing job does.
SLOW_EXIT = "trap 'sleep 3; exit 143' TERM; echo up; while true; do sleep 0.1; done"


def test_the_room_a_preemption_frees_is_held_for_the_preemptor(tmp_path: Path) -> None:
    """With no backfill holds (hold_depth = 0), the half of the worker the quick victim
    frees first still waits for the preemptor: the filler job pending before it starts
    only once the preemptor has run (the victims end PREEMPTED: preempt_mode "cancel").
    `rbs job show` says which jobs are preemptible."""
    port = pick_port_pair("127.0.0.1")
    config = tmp_path / "server.toml"
    config.write_text(HELD_CONFIG)
    ready = tmp_path / "server.ready"
    log = tmp_path / "server.log"
    serve = ["remote", "serve", "--config", str(config), "--port", str(port)]
    serve += ["--data-dir", str(tmp_path / "data"), "--ready-file", str(ready)]
    server = spawn_rbs(serve, log)
    cluster = JobCluster(tmp_path / "unused", port=port, serve=False, jobs=SchedulerConfig())
    try:
        wait_ready(server, ready, log)
        cluster.add_worker(tmp_path / "w1", job_slots=3, cpus=2, name="w1")
        client = cluster.client()
        quick = client.submit(["sleep", "600"], queue="low", preemptible=True, name="quick")
        slow = client.submit(["sh", "-c", SLOW_EXIT], queue="low", preemptible=True, name="slow")

        def out(job: str) -> list[str]:
            return [x.text for x in client.logs(job) if x.stream == "out"]

        wait_for("both victims to run", lambda: "up" in out(slow), timeout=120)
        wait_for("quick to run", lambda: client.show(quick).state == "RUNNING", timeout=120)
        filler = client.submit(["echo", "filler"], queue="low", name="filler")
        wait_for(
            "the filler to wait for room",
            lambda: client.show(filler).reason == "Resources",
            timeout=120,
        )
        urgent = client.submit(["echo", "urgent"], queue="high", cpus="2", name="urgent")
        assert cluster.wait(urgent, timeout=180).state == "COMPLETED"
        assert cluster.wait(filler, timeout=180).state == "COMPLETED"
        first, second = client.show(urgent), client.show(filler)
        assert first.raw["start_time"] <= second.raw["start_time"]
        env = {**os.environ, "RBS_REMOTE": cluster.address, "RBS_HOME": str(tmp_path / "home")}

        def show(job: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "rbs", "job", "show", job],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert re.search(r"Preemptible\s+yes", show(slow))
        assert re.search(r"Preemptible\s+no", show(urgent))
        assert client.show(slow).state == client.show(quick).state == "PREEMPTED"
    finally:
        cluster.stop()
        stop_process(server)
