"""Test harness: an in-process server with Execution, plus in-process workers, on one loop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rbs.executor.worker import Worker, WorkerConfig
from rbs.scheduler.dispatch import WorkerView
from rbs.server.cluster import RunningCluster, start_cluster
from rbs.server.config import Config, ServerConfig
from rbs.server.execution import ExecutionLimits
from rbs.server.workers_service import HubConfig, WorkerHub

T = TypeVar("T")

FAST_HUB = HubConfig(
    heartbeat_interval=0.2,
    heartbeat_timeout=3.0,
    reconnect_grace=1.0,
    max_attempts=3,
    validate=True,
)


class Cluster:
    """A server (and workers added with `add_worker`) on a loop in a background thread."""

    def __init__(
        self,
        data_dir: Path,
        *,
        hub: HubConfig = FAST_HUB,
        limits: ExecutionLimits | None = None,
        token_file: Path | None = None,
        port: int = 0,
    ) -> None:
        self.data_dir = data_dir
        self.config = Config(
            server=ServerConfig(
                host="127.0.0.1", port=port, data_dir=data_dir, token_file=token_file
            )
        )
        self.hub_config = hub
        self.limits = limits
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        try:
            self.server: RunningCluster = self.call(self._start())
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            raise
        self.workers: list[tuple[Worker, asyncio.Future[None]]] = []

    def restart_server(self) -> None:
        """Stop the server (workers keep running) and start a new one on the same port
        and data dir, as after a crash or an upgrade."""
        port = self.port
        self.call(self.server.stop(grace=0))
        self.config = Config(
            server=ServerConfig(
                host="127.0.0.1",
                port=port,
                data_dir=self.data_dir,
                token_file=self.config.server.token_file,
            )
        )
        self.server = self.call(self._start())

    async def _start(self) -> RunningCluster:
        # No job driver: these tests run build actions only.
        return await start_cluster(
            self.config, jobs=False, hub_config=self.hub_config, limits=self.limits
        )

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def target(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    def add_worker(self, work_dir: Path, *, slots: int = 2, token: str | None = None) -> Worker:
        async def make() -> tuple[Worker, asyncio.Future[None]]:
            w = Worker(
                WorkerConfig(
                    server=self.target,
                    work_dir=work_dir,
                    token=token,
                    build_slots=slots,
                    job_slots=1,
                    reconnect_timeout_s=10,
                )
            )
            return w, asyncio.ensure_future(w.run())

        worker, fut = self.call(make())
        self.workers.append((worker, fut))
        return worker

    def wait_workers(self, n: int, timeout: float = 20) -> None:
        """Block until `n` workers are connected (readiness, not a fixed sleep)."""
        hub = self.hub
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            views = self.call(_views(hub))
            if sum(1 for v in views if v.state.value == "CONNECTED") >= n:
                return
            time.sleep(0.02)
        raise TimeoutError(f"{n} worker(s) did not connect within {timeout}s")

    @property
    def hub(self) -> WorkerHub:
        return self.server.hub

    def stop_workers(self) -> None:
        for w, fut in self.workers:
            self.loop.call_soon_threadsafe(w.stop)
            self.call(_wait(fut))
        self.workers.clear()

    def stop(self) -> None:
        self.stop_workers()
        self.call(self.server.stop(grace=1.0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _views(hub: WorkerHub) -> list[WorkerView]:
    return hub.workers()


async def _wait(fut: asyncio.Future[None]) -> None:
    await asyncio.wait({fut}, timeout=20)
