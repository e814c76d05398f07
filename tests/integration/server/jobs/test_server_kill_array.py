"""kill -9 of a real server under a 1,000-task array: nothing lost, nothing run twice."""

from __future__ import annotations

import collections
import signal
from pathlib import Path

from jobs_harness import JobCluster, spawn_rbs, stop_process, wait_for, wait_ready

from rbs.scheduler.config import SchedulerConfig
from rbs.server.cluster import pick_port_pair

TASKS = 1000


def _lines(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [(i, a) for i, a in (x.split() for x in path.read_text().splitlines() if x)]


def test_server_killed_under_an_array_loses_and_repeats_no_task(tmp_path: Path) -> None:
    port = pick_port_pair("127.0.0.1")
    data = tmp_path / "data"
    runs = tmp_path / "runs"
    serve = [
        "remote",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data),
        "--ready-file",
        str(tmp_path / "server.ready"),
    ]
    log = tmp_path / "server.log"
    server = spawn_rbs(serve, log)
    cluster = JobCluster(tmp_path / "unused", port=port, serve=False, jobs=SchedulerConfig())
    try:
        wait_ready(server, tmp_path / "server.ready", log)
        cluster.add_worker(tmp_path / "w1", job_slots=4, cpus=4)
        client = cluster.client()
        # Each task appends its index and attempt (one small O_APPEND write: atomic).
        job = client.submit(
            ["sh", "-c", f'echo "$RBS_ARRAY_INDEX $RBS_ATTEMPT" >> {runs}'],
            array=f"0-{TASKS - 1}",
        )
        wait_for("a third of the tasks to run", lambda: len(_lines(runs)) >= TASKS // 3, 120)
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        (tmp_path / "server.ready").unlink()
        server = spawn_rbs(serve, log)
        wait_ready(server, tmp_path / "server.ready", log)
        client = cluster.client()
        info = cluster.wait(job, timeout=180)
        assert info.state == "COMPLETED", info.raw
        counts = collections.Counter(i for i, _ in _lines(runs))
        lost = [i for i in map(str, range(TASKS)) if i not in counts]
        twice = sorted((i for i, n in counts.items() if n > 1), key=int)
        assert (lost, twice) == ([], []), f"{len(lost)} lost, {len(twice)} run twice"
    finally:
        cluster.stop()
        stop_process(server)
