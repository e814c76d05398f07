"""The whole cluster server: REAPI + Workers on gRPC, the job scheduler, and the jobs API.

`start_cluster` is what `rbs remote serve` runs: the gRPC server with every service
(cache, execution, workers), the job driver on the same worker hub, and the JSON jobs
API on the next port up (gRPC port + 1; see docs/design/jobs.md).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from dataclasses import dataclass

import grpc
from aiohttp import web

from rbs.server.config import Config
from rbs.server.exec_setup import cluster_of
from rbs.server.grpc_server import SERVICES, RunningServer, ServerState, Service, start_server
from rbs.server.job_driver import JobDriver
from rbs.server.jobs_http import JobsApi, start_http
from rbs.wire.auth import read_token_file

log = logging.getLogger(__name__)

JOBS = "rbs.v1.Jobs"
_DRIVERS: dict[int, JobDriver] = {}


def jobs_of(state: ServerState) -> JobDriver:
    """The server's job driver, created (and restored from its journal) on first use."""
    driver = _DRIVERS.get(id(state))
    if driver is None:
        hub = cluster_of(state).hub
        driver = JobDriver(state.data_dir, state.config.jobs, hub)
        driver.start()
        _DRIVERS[id(state)] = driver
        key = id(state)

        async def close() -> None:
            await driver.stop()
            _DRIVERS.pop(key, None)

        state.on_stop(close)
    return driver


def _add_jobs(server: grpc.aio.Server, state: ServerState) -> None:
    jobs_of(state)


JOBS_SERVICE = Service(name=JOBS, add=_add_jobs)


def pick_port_pair(host: str, tries: int = 50) -> int:
    """A port P with P and P + 1 both free right now (for gRPC and the jobs API)."""
    for _ in range(tries):
        with socket.socket() as a:
            a.bind((host, 0))
            port = a.getsockname()[1]
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind((host, port + 1))
                except OSError:
                    continue
                return int(port)
    raise OSError(f"found no two adjacent free ports on {host} in {tries} tries")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningCluster:
    grpc: RunningServer
    http: web.AppRunner
    http_port: int
    driver: JobDriver

    @property
    def port(self) -> int:
        return self.grpc.port

    async def stop(self, grace: float = 5.0) -> None:
        await self.http.cleanup()
        await self.grpc.stop(grace)


async def start_cluster(config: Config) -> RunningCluster:
    """Start everything; port 0 picks a free pair of adjacent ports."""
    host = config.server.host
    if config.server.port == 0:
        config = dataclasses.replace(
            config, server=dataclasses.replace(config.server, port=pick_port_pair(host))
        )
    running = await start_server(config, (*SERVICES, JOBS_SERVICE))
    token = read_token_file(config.server.token_file) if config.server.token_file else None
    driver = jobs_of(running.state)
    try:
        http = await start_http(JobsApi(driver, running.state.store, token), host, running.port + 1)
    except OSError as e:
        await running.stop(0)
        raise OSError(
            f"cannot serve the jobs API on {host}:{running.port + 1} (the gRPC port + 1): {e}; "
            "pick another --port"
        ) from None
    log.info("jobs API on http://%s:%d", host, running.port + 1)
    return RunningCluster(grpc=running, http=http, http_port=running.port + 1, driver=driver)
