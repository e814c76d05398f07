"""Maintenance reservations and drains against `rbs remote serve` with two real workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_harness import spawn_rbs, spawn_worker, stop_process, wait_for, wait_ready

pytestmark = pytest.mark.timeout(240)


def rbs(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RBS_REMOTE")}
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str], Path]]:
    """A server (no tokens: every caller is an admin) and two workers of one job slot."""
    tmp = tmp_path_factory.mktemp("reserve")
    log, ready = tmp / "server.log", tmp / "ready.json"
    args = ["remote", "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    server = spawn_rbs([*args, "--ready-file", str(ready)], log)
    procs = [server]
    try:
        address = f"127.0.0.1:{wait_ready(server, ready, log)['port']}"
        ids = []
        for name in ("w1", "w2"):
            proc, wready, wlog = spawn_worker(address, tmp, name)
            procs.append(proc)
            ids.append(str(wait_ready(proc, wready, wlog)["worker_id"]))
        yield address, ids, tmp
    finally:
        for p in reversed(procs):
            stop_process(p)


def show(server: str, job: str) -> dict[str, object]:
    r = rbs("job", "show", "--server", server, job, "--json")
    assert r.returncode == 0, r.stderr
    doc: dict[str, object] = json.loads(r.stdout)
    return doc


def submit(server: str, *args: str) -> str:
    r = rbs("job", "submit", "--server", server, "--cpus", "0.1", "--memory-gb", "0.0625", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_window_keeps_long_jobs_off_and_lets_short_ones_fill_the_gap(
    cluster: tuple[str, list[str], Path],
) -> None:
    server, _workers, _ = cluster
    r = rbs("job", "reserve", "--server", server, "maint", "--in", "1h", "--for", "2h",
            "--reason", "kernel update")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "reserved maint:" in r.stdout and "all workers" in r.stdout
    r = rbs("job", "reservations", "--server", server, "--json")
    (doc,) = [json.loads(x) for x in r.stdout.splitlines()]
    assert (doc["name"], doc["reason"], doc["workers"]) == ("maint", "kernel update", [])

    long = submit(server, "--time", "2h", "--", "true")
    wait_for("a reason for the long job", lambda: show(server, long)["reason"] == "Maintenance")
    assert show(server, long)["state"] == "PENDING"
    short = submit(server, "--time", "10m", "--wait", "--", "true")
    assert show(server, short)["state"] == "COMPLETED"

    # Overlapping or past windows are refused, naming what to change.
    r = rbs("job", "reserve", "--server", server, "again", "--in", "2h", "--for", "1h")
    assert r.returncode == 2 and "overlaps maint" in r.stderr, r.stderr
    r = rbs("job", "reserve", "--server", server, "old", "--at", "now-1h", "--for", "1h")
    assert r.returncode == 2 and "in the past" in r.stderr, r.stderr
    r = rbs("job", "reserve", "--server", server, "x", "--in", "1h")
    assert r.returncode == 2 and "--for DURATION" in r.stderr, r.stderr
    r = rbs("job", "reserve", "--server", server, "x", "--in", "3h", "--for", "1h",
            "--workers", "nope")  # fmt: skip
    assert r.returncode == 2 and "unknown worker nope" in r.stderr, r.stderr

    r = rbs("job", "reserve", "--server", server, "maint", "--cancel")
    assert r.returncode == 0, r.stderr
    wait_for("the long job to run", lambda: show(server, long)["state"] == "COMPLETED")


def test_drain_and_resume(cluster: tuple[str, list[str], Path]) -> None:
    server, (w1, w2), _ = cluster
    running = submit(server, "--", "sleep", "600")
    wait_for("the job to run", lambda: show(server, running)["state"] == "RUNNING")
    (busy,) = show(server, running)["workers"]  # type: ignore[misc]
    idle = w2 if busy == w1 else w1
    r = rbs("remote", "drain", "--server", server, busy, "--reason", "disk swap")
    assert r.returncode == 0 and f"draining {busy}" in r.stdout, r.stderr
    r = rbs("remote", "drain", "--server", server, idle)
    assert r.returncode == 0, r.stderr
    r = rbs("remote", "status", "--server", server, "--json")
    states = {w["worker_id"]: w["state"] for w in json.loads(r.stdout)["workers"]}
    assert states[busy].endswith(" draining") and states[idle].endswith(" draining")

    # The running job goes on, and its log says the drain began.
    def noted() -> bool:
        out = rbs("job", "logs", "--server", server, running).stdout
        return "maintenance window drain:" in out and "the job keeps running" in out

    wait_for("the drain's note in the running job's log", noted)
    assert show(server, running)["state"] == "RUNNING"
    waiting = submit(server, "--", "true")
    wait_for("Maintenance", lambda: show(server, waiting)["reason"] == "Maintenance")

    r = rbs("remote", "resume", "--server", server, idle)
    assert r.returncode == 0 and f"resumed {idle}" in r.stdout, r.stderr
    wait_for("the waiting job to end", lambda: show(server, waiting)["state"] == "COMPLETED")
    assert show(server, waiting)["workers"] == [idle]
    r = rbs("remote", "resume", "--server", server, idle)
    assert r.returncode == 2 and "no reservation named 'drain:" in r.stderr, r.stderr
    assert rbs("remote", "resume", "--server", server, busy).returncode == 0
    assert rbs("job", "cancel", "--server", server, running).returncode == 0
