"""A worker up longer than its reconnect timeout rides over a server restart: the timeout
counts from the last time the server was reachable, not from the worker's start."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from jobs_harness import JobCluster, wait_for

from rbs.executor.worker import Worker, WorkerConfig

RECONNECT_S = 2.0


def test_a_long_running_worker_survives_a_server_restart(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server")
    worker: Worker | None = None
    try:

        async def make() -> tuple[Worker, asyncio.Future[None]]:
            w = Worker(
                WorkerConfig(
                    server=cluster.address,
                    work_dir=tmp_path / "w1",
                    cpus=1,
                    build_slots=1,
                    job_slots=1,
                    reconnect_timeout_s=RECONNECT_S,
                )
            )
            return w, asyncio.ensure_future(w.run())

        worker, fut = cluster.call(make())
        cluster.workers.append((worker, fut))
        wait_for("the worker to register", worker.connected.is_set)
        # The scenario: a worker up for longer than its reconnect timeout.
        up_since = time.monotonic()
        wait_for(
            "the worker to be up longer than its reconnect timeout",
            lambda: time.monotonic() - up_since > RECONNECT_S * 1.5,
            timeout=30,
        )
        assert not fut.done()
        cluster.stop_server()
        wait_for("the worker to notice", lambda: not worker.connected.is_set() or fut.done())
        cluster.start_server()
        wait_for(
            "the worker to register again (or exit)",
            lambda: worker.connected.is_set() or fut.done(),
            timeout=30,
        )
        if fut.done():
            raise AssertionError(f"the worker exited instead of reconnecting: {fut.exception()!r}")
        assert worker.worker_id in cluster.live_workers()
    finally:
        cluster.stop()
