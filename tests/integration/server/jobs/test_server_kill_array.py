"""kill -9 of a real server under a 1,000-task array and a 20-job afterok chain:
nothing lost, nothing run twice, no two attempts of a task alive at once."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from chaos import Counts, Ledger
from jobs_harness import JobCluster, spawn_rbs, stop_process, wait_for, wait_ready

from rbs.scheduler.config import SchedulerConfig
from rbs.server.cluster import pick_port_pair

TASKS = 1000


CHAIN = 20


@pytest.mark.chaos
def test_server_killed_under_an_array_and_a_chain_loses_and_repeats_no_task(
    tmp_path: Path, chaos_counts: Callable[[Counts], None]
) -> None:
    port = pick_port_pair("127.0.0.1")
    data = tmp_path / "data"
    ledger = Ledger(tmp_path / "ledger")
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
        array = client.submit(ledger.wrap("true"), array=f"0-{TASKS - 1}")
        # An afterok chain beside it: each link starts only once the one before it ended,
        # ahead of the array's tasks (a higher priority), so the kill falls mid-chain.
        chain, prev = [], None
        for i in range(CHAIN):
            deps = {"deps": f"afterok:{prev}"} if prev else {}
            prev = client.submit(ledger.wrap("sleep 0.2", key=f"c{i}"), priority=100, **deps)
            chain.append(prev)

        def links() -> int:
            return sum(1 for kind, k, _ in ledger.entries() if kind == "end" and k[0] == "c")

        wait_for(
            "a third of the tasks and a few links to run",
            lambda: ledger.ended() >= TASKS // 3 and links() >= 3,
            120,
        )
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        print(f"killed with {ledger.ended()} runs ended, {links()} of {CHAIN} chain links")
        (tmp_path / "server.ready").unlink()
        server = spawn_rbs(serve, log)
        wait_ready(server, tmp_path / "server.ready", log)
        for job in (array, *chain):
            info = cluster.wait(job, timeout=180)
            assert info.state == "COMPLETED", info.raw
        counts = ledger.counts([*map(str, range(TASKS)), *(f"c{i}" for i in range(CHAIN))])
        chaos_counts(counts)
        assert counts.ok(), counts.summary()
        order = [k for kind, k, _ in ledger.entries() if kind == "end" and k.startswith("c")]
        assert order == [f"c{i}" for i in range(CHAIN)], "the chain ran out of order"
    finally:
        cluster.stop()
        stop_process(server)
