"""Server wiring for remote execution: the Execution and Workers services on one hub.

`execution_services()` returns the two `Service` entries `rbs.server.grpc_server` lists.
Both share one `ExecutionCluster` per server (the worker hub, the operation
registry and its SQLite file `<data_dir>/execution.db`), created by whichever entry
is added first; other components (the job scheduler) reach the same hub with
`cluster_of(state)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.server.execution import ExecutionEngine, ExecutionLimits, ExecutionServicer
from rbs.server.operations import OperationRegistry, OperationStore
from rbs.server.workers_service import HubConfig, WorkerHub, WorkersServicer

if TYPE_CHECKING:
    from rbs.server.grpc_server import ServerState, Service

WORKERS = "rbs.v1.Workers"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionCluster:
    hub: WorkerHub
    engine: ExecutionEngine
    store: OperationStore


_CLUSTERS: dict[int, ExecutionCluster] = {}


def cluster_of(
    state: ServerState, hub_config: HubConfig | None = None, limits: ExecutionLimits | None = None
) -> ExecutionCluster:
    """The server's execution cluster, created (and its state restored) on first use."""
    key = id(state)
    cluster = _CLUSTERS.get(key)
    if cluster is not None:
        return cluster
    cfg = state.config.execution
    if hub_config is None:
        hub_config = HubConfig(
            heartbeat_interval=cfg.heartbeat_interval,
            heartbeat_timeout=cfg.heartbeat_timeout,
            reconnect_grace=cfg.reconnect_grace,
            max_attempts=cfg.max_attempts,
        )
    if limits is None:
        limits = ExecutionLimits(
            default_timeout_s=cfg.default_timeout, max_timeout_s=cfg.max_timeout
        )
    store = OperationStore(state.data_dir / "execution.db")
    hub = WorkerHub(store, hub_config)
    engine = ExecutionEngine(
        cas=state.store,
        results=state.action_cache,
        registry=OperationRegistry(store),
        hub=hub,
        limits=limits,
    )
    engine.restore()
    hub.start()
    cluster = ExecutionCluster(hub=hub, engine=engine, store=store)
    _CLUSTERS[key] = cluster

    async def close() -> None:
        await hub.stop()
        store.close()
        _CLUSTERS.pop(key, None)

    state.on_stop(close)
    return cluster


def execution_services(
    hub_config: HubConfig | None = None, limits: ExecutionLimits | None = None
) -> tuple[Service, Service]:
    """The Execution and Workers service entries for `start_server`."""
    from rbs.server.grpc_server import EXECUTION, Service

    def add_execution(server: grpc.aio.Server, state: ServerState) -> None:
        engine = cluster_of(state, hub_config, limits).engine
        re_grpc.add_ExecutionServicer_to_server(ExecutionServicer(engine, state.instances), server)

    def add_workers(server: grpc.aio.Server, state: ServerState) -> None:
        hub = cluster_of(state, hub_config, limits).hub
        w_grpc.add_WorkersServicer_to_server(WorkersServicer(hub), server)

    return (
        Service(name=EXECUTION, add=add_execution),
        Service(name=WORKERS, add=add_workers),
    )
