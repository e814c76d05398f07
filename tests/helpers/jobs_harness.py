"""Test harness for jobs: `start_cluster` and in-process workers on one background loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rbs.client.jobs import JobInfo, JobsClient
from rbs.executor.containers import ContainerSettings
from rbs.executor.worker import Worker, WorkerConfig
from rbs.scheduler.config import SchedulerConfig
from rbs.server.cluster import RunningCluster, start_cluster
from rbs.server.config import Config, ServerConfig

T = TypeVar("T")

# A worker silent for this long is lost: short, so worker-loss tests end quickly.
FAST_JOBS = SchedulerConfig(heartbeat_timeout=3.0, validate=True)


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 30.0) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.01)


class JobCluster:
    """The whole cluster server plus workers, on a loop in a background thread."""

    def __init__(
        self,
        data_dir: Path,
        *,
        jobs: SchedulerConfig = FAST_JOBS,
        port: int = 0,
        serve: bool = True,
    ) -> None:
        self.data_dir = data_dir
        self.config = Config(
            server=ServerConfig(host="127.0.0.1", port=port, data_dir=data_dir), jobs=jobs
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: RunningCluster | None = None
        self.workers: list[tuple[Worker, asyncio.Future[None]]] = []
        self._clients: list[JobsClient] = []
        if serve:
            self.start_server()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start_server(self) -> None:
        self.server = self.call(start_cluster(self.config))
        # A restart reuses the ports the first start picked.
        self.config = Config(
            server=ServerConfig(host="127.0.0.1", port=self.server.port, data_dir=self.data_dir),
            jobs=self.config.jobs,
        )

    def stop_server(self) -> None:
        assert self.server is not None
        self.call(self.server.stop(grace=0.5))
        self.server = None

    @property
    def port(self) -> int:
        return self.config.server.port

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> JobsClient:
        c = JobsClient(self.address)
        self._clients.append(c)
        return c

    def add_worker(
        self,
        work_dir: Path,
        *,
        job_slots: int = 4,
        cpus: int = 4,
        memory_gb: float = 4,
        name: str = "",
        gpus: tuple[str, ...] = (),
        containers: str = "auto",
        container_cache: int | None = None,
        container_pull: str = "auto",
        run_users: Any = None,  # rbs.executor.runuser.RunUsers: --run-uids
    ) -> Worker:
        async def make() -> tuple[Worker, asyncio.Future[None]]:
            w = Worker(
                WorkerConfig(
                    server=self.address,
                    work_dir=work_dir,
                    name=name,
                    cpus=cpus,
                    memory_bytes=int(memory_gb * (1 << 30)),
                    gpu_ids=gpus,
                    build_slots=1,
                    job_slots=job_slots,
                    reconnect_timeout_s=60,
                    containers=ContainerSettings(
                        engine=containers, cache_max_bytes=container_cache, pull=container_pull
                    ),
                    run_users=run_users,
                )
            )
            return w, asyncio.ensure_future(w.run())

        worker, fut = self.call(make())
        self.workers.append((worker, fut))
        # Registered means the scheduler's WorkerUp is queued ahead of any later submit.
        wait_for(f"worker {worker.worker_id} to register", worker.connected.is_set)
        return worker

    def live_workers(self) -> set[str]:
        """The workers the scheduler considers alive."""

        async def alive() -> set[str]:
            assert self.server is not None
            return {w.worker_id for w in self.server.driver.sched.snapshot().workers if w.alive}

        return self.call(alive())

    def wait(self, job_id: str, timeout: float = 60) -> JobInfo:
        info = self.client().wait(job_id, timeout=timeout)
        if not info.done:
            raise TimeoutError(f"job {job_id} still {info.state} after {timeout:g}s")
        return info

    def stop(self) -> None:
        for c in self._clients:
            c.close()
        for w, fut in self.workers:
            self.loop.call_soon_threadsafe(w.stop)
            self.call(_settle(fut))
        self.workers.clear()
        if self.server is not None:
            self.stop_server()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _settle(fut: asyncio.Future[None]) -> None:
    await asyncio.wait({fut}, timeout=30)


def spawn_rbs(
    args: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rbs", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def spawn_worker(
    address: str, folder: Path, name: str = "w1", job_slots: int = 1
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """A real `rbs remote worker` process under folder/name: (process, ready file, log)."""
    ready, log = folder / f"{name}.ready", folder / f"{name}.log"
    args = ["remote", "worker", "--server", address, "--work-dir", str(folder / name)]
    args += ["--job-slots", str(job_slots), "--ready-file", str(ready)]
    return spawn_rbs(args, log), ready, log


def wait_ready(proc: subprocess.Popen[bytes], ready: Path, log: Path) -> dict[str, object]:
    """The JSON of a --ready-file, once the process wrote it (or its log, if it died)."""

    def check() -> dict[str, object] | None:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(FileNotFoundError, ValueError):
            data: dict[str, object] = json.loads(ready.read_text())
            return data
        return None

    return wait_for(f"{ready.name}", check, timeout=60)


def kill_group(pid_file: Path) -> None:
    """SIGKILL the process group whose leader's pid a job wrote to `pid_file`."""
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
