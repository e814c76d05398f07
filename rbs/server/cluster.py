"""The server process, built explicitly: every part in order, each handed to what needs it.

`start_cluster` is what `rbs remote serve` runs, and what the tests' harnesses run. It
builds, in this order and nowhere else:

    store          the CAS (DiskStore under <data_dir>/cas, bounded by [cas] max_size)
    action cache   results in <data_dir>/action_cache.db, checked against the store
    operations     the Execution operations and known workers, <data_dir>/execution.db
    worker hub     the Workers streams and the build-action dispatcher (on operations)
    engine         REAPI Execution (on store, action cache, operations and the hub)
    job driver     the job scheduler's driver (on the hub; jobs.db, job_logs.db, ...)
    gRPC server    every service of rbs.server.grpc_server.SERVICES, on the parts above
    jobs API       JSON over HTTP on the gRPC port + 1 (see docs/design/jobs.md)

The hub and its two listeners (engine, driver) need each other; the hub is built first
and is handed them once they exist. Every part that holds a file or a task registers
its close on one exit stack, so a failed start undoes what it did and `stop` closes in
reverse order. With `jobs=False` the server has no job driver and no jobs API (the
REAPI tests need neither).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
from dataclasses import dataclass

from aiohttp import web

from rbs.cas.store import BlobStore
from rbs.server.ac_store import ActionResultStore
from rbs.server.action_cache import ActionCache
from rbs.server.cas_metrics import CountingDiskStore
from rbs.server.config import Config
from rbs.server.dashboard import Dashboard
from rbs.server.execution import ExecutionEngine, ExecutionLimits
from rbs.server.grpc_server import RunningServer, start_grpc
from rbs.server.input_pins import InputPins
from rbs.server.instances import Instances
from rbs.server.invocations import InvocationStore
from rbs.server.job_driver import JobDriver
from rbs.server.jobs_http import JobsApi, start_http
from rbs.server.metrics import ServerMetrics
from rbs.server.operations import OperationRegistry, OperationStore
from rbs.server.reservations import Reservations
from rbs.server.secrets import JobSecrets
from rbs.server.tokens import ServerAuth, advertised_address, run_env, server_auth
from rbs.server.workers_service import HubConfig, WorkerHub

log = logging.getLogger(__name__)


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


def open_store(config: Config) -> CountingDiskStore:
    """The server's CAS under the data dir, bounded by `[cas] max_size` when set.

    With a bound, every write that takes the store over it evicts least recently used
    blobs outside the lease (`[cas] lease`, 3 h); the action cache drops results whose
    outputs went. FindMissingBlobs answers from the store's presence index
    (rbs.cas.presence, docs/design/cas.md): the server owns this folder.
    """
    store = CountingDiskStore(  # a DiskStore that counts lookups and evictions (/metrics)
        config.server.data_dir / "cas",
        max_size=config.cas.max_size,
        lease=config.cas.lease,
        index=True,
    )
    swept = store.sweep_tmp()
    if swept:
        log.info("removed %d unfinished upload(s) left by an earlier run", swept)
    return store


def _keep_inputs(
    stack: contextlib.AsyncExitStack, store: BlobStore, driver: JobDriver, keep: int
) -> None:
    """Keep the input trees of jobs in history from eviction (rbs.server.input_pins)."""
    if not isinstance(store, CountingDiskStore):
        return
    pins = InputPins(store, keep)
    store.pins = pins
    pins.scan(driver)
    task = asyncio.get_running_loop().create_task(pins.follow(driver))

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(stop)


def hub_config_of(config: Config) -> HubConfig:
    cfg = config.execution
    return HubConfig(
        heartbeat_interval=config.worker_heartbeat_interval,
        heartbeat_timeout=cfg.heartbeat_timeout,
        reconnect_grace=cfg.reconnect_grace,
        max_attempts=cfg.max_attempts,
        lease_ttl=config.lease_ttl,
        kill_grace=config.kill_grace,
    )


def limits_of(config: Config) -> ExecutionLimits:
    cfg = config.execution
    return ExecutionLimits(default_timeout_s=cfg.default_timeout, max_timeout_s=cfg.max_timeout)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerParts:
    """What one server is made of, as `start_cluster` built it."""

    config: Config
    store: BlobStore
    action_cache: ActionCache
    instances: Instances
    operations: OperationStore
    hub: WorkerHub
    engine: ExecutionEngine
    driver: JobDriver | None
    auth: ServerAuth


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningCluster:
    """A started server: its parts, the gRPC server, the jobs API, and a graceful stop."""

    parts: ServerParts
    grpc: RunningServer
    http: web.AppRunner | None
    http_port: int | None
    closing: contextlib.AsyncExitStack

    @property
    def port(self) -> int:
        return self.grpc.port

    @property
    def hub(self) -> WorkerHub:
        return self.parts.hub

    def reload_tokens(self) -> bool:
        """Read the tokens file again (what SIGHUP does)."""
        return self.parts.auth.reload()

    @property
    def driver(self) -> JobDriver:
        if self.parts.driver is None:
            raise RuntimeError("this server was started without jobs (jobs=False)")
        return self.parts.driver

    async def stop(self, grace: float = 5.0) -> None:
        """Stop the jobs API, let gRPC calls in flight finish for `grace` s, then close
        every part in the reverse order of its building."""
        if self.http is not None:
            await self.http.cleanup()
        await self.grpc.stop(grace)
        await self.closing.aclose()


async def start_cluster(
    config: Config,
    *,
    jobs: bool = True,
    hub_config: HubConfig | None = None,
    limits: ExecutionLimits | None = None,
) -> RunningCluster:
    """Build every part in order and start serving; port 0 picks a free port (a free pair
    of adjacent ports with `jobs`, for gRPC and the jobs API)."""
    host = config.server.host
    if jobs and config.server.port == 0:
        config = dataclasses.replace(
            config, server=dataclasses.replace(config.server, port=pick_port_pair(host))
        )
    data_dir = config.server.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    # Before the job driver makes jobs.db: a new journal gets a new run-token key.
    auth = server_auth(config)
    async with contextlib.AsyncExitStack() as stack:
        instances = Instances(config.server.instance_names, config.server.digest_functions)
        store = open_store(config)
        stack.callback(store.close)
        results = ActionResultStore(data_dir / "action_cache.db")
        stack.callback(results.close)
        action_cache = ActionCache(store, results)
        operations = OperationStore(data_dir / "execution.db")
        stack.callback(operations.close)
        invocations = InvocationStore(data_dir / "invocations.db")
        stack.callback(invocations.close)
        hub = WorkerHub(operations, hub_config or hub_config_of(config))
        engine = ExecutionEngine(
            cas=store,
            results=action_cache,
            registry=OperationRegistry(operations),
            hub=hub,
            limits=limits or limits_of(config),
        )
        driver = JobDriver(data_dir, config.jobs, hub) if jobs else None
        hub.set_listeners(actions=engine, jobs=driver)
        metrics = ServerMetrics()  # GET /metrics on the jobs API port
        metrics.attach(driver, hub, store)
        engine.restore()
        hub.start()
        stack.push_async_callback(hub.stop)
        secrets: JobSecrets | None = None
        reservations: Reservations | None = None
        if driver is not None:
            auth.run_user = driver.sched.run_user
            secrets = JobSecrets(data_dir, driver)
            base_env = run_env(auth, advertised_address(host, config.server.port))
            driver.run_env = secrets.wrap(base_env)
            driver.start()
            stack.push_async_callback(driver.stop)
            _keep_inputs(stack, store, driver, config.cas.keep_inputs)
            secrets.start()
            stack.push_async_callback(secrets.stop)
            reservations = Reservations(data_dir, driver)
            hub.draining = reservations.is_draining
            reservations.start()
            stack.push_async_callback(reservations.stop)
        parts = ServerParts(
            config=config,
            store=store,
            action_cache=action_cache,
            instances=instances,
            operations=operations,
            hub=hub,
            engine=engine,
            driver=driver,
            auth=auth,
        )
        grpc = await start_grpc(
            config,
            store=parts.store,
            action_cache=parts.action_cache,
            instances=parts.instances,
            engine=parts.engine,
            hub=parts.hub,
            auth=auth,
            metrics=metrics,
            invocations=invocations,
        )
        # Undoes a failed start; `stop` stops the server first, with its grace.
        stack.push_async_callback(grpc.stop, 0)
        http, http_port = None, None
        if driver is not None:
            http_port = grpc.port + 1
            try:
                api = JobsApi(driver, store, auth, secrets)
                api.reservations = reservations
                api.metrics = metrics
                api.dashboard = Dashboard(
                    api,
                    tls=bool(config.server.tls_cert),
                    engine=engine,
                    instances=instances.names,
                )
                api.dashboard.invocations = invocations
                http = await start_http(api, host, http_port, config)
            except OSError as e:
                raise OSError(
                    f"cannot serve the jobs API on {host}:{http_port} (the gRPC port + 1): {e}; "
                    "pick another --port"
                ) from None
            scheme = "https" if config.server.tls_cert else "http"
            log.info("jobs API on %s://%s:%d", scheme, host, http_port)
        return RunningCluster(
            parts=parts, grpc=grpc, http=http, http_port=http_port, closing=stack.pop_all()
        )
    raise AssertionError("unreachable")  # pragma: no cover - the stack re-raises
