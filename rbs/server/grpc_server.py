"""The gRPC edge of the server: one grpc.aio server hosting every service on the parts it is given.

The services a server hosts are listed in one place, `SERVICES`, and added by one
function, `add_servicers`, each servicer built on the parts it needs (the CAS, the
action cache, the instance policy, the execution engine, the worker hub), passed in
as arguments. This module builds none of those parts: `rbs.server.cluster` builds them,
in order, and hands them here. The auth interceptor (rbs.wire.auth) guards every service,
by the caller's roles.

Message size limits are raised to the advertised batch limit plus headroom; blobs
larger than that travel through ByteStream in chunks, in constant memory.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.longrunning import operations_pb2_grpc as lro_grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.cas.store import BlobStore
from rbs.server.action_cache import ActionCache, ActionCacheServicer
from rbs.server.bes_service import add_bes_servicer
from rbs.server.bytestream import ByteStreamServicer
from rbs.server.capabilities import CapabilitiesServicer, server_capabilities
from rbs.server.cas_service import CasServicer, add_cas_servicer
from rbs.server.config import Config
from rbs.server.execution import ExecutionEngine, ExecutionServicer
from rbs.server.instances import Instances
from rbs.server.invocations import InvocationStore
from rbs.server.metrics import ServerMetrics
from rbs.server.operations_service import OperationsServicer
from rbs.server.tls import check_pair, grpc_credentials
from rbs.server.tokens import ServerAuth
from rbs.server.workers_service import WorkerHub, WorkersServicer
from rbs.wire.auth import AuthInterceptor
from rbs.wire.errors import DecodingInterceptor

log = logging.getLogger(__name__)

_REAPI = "build.bazel.remote.execution.v2"
CAPABILITIES = f"{_REAPI}.Capabilities"
CAS = f"{_REAPI}.ContentAddressableStorage"
ACTION_CACHE = f"{_REAPI}.ActionCache"
EXECUTION = f"{_REAPI}.Execution"
BYTESTREAM = "google.bytestream.ByteStream"
WORKERS = "rbs.v1.Workers"
OPERATIONS = "google.longrunning.Operations"
BUILD_EVENTS = "google.devtools.build.v1.PublishBuildEvent"

# Every gRPC service `rbs remote serve` hosts, REAPI and rbs's own alike.
SERVICES: tuple[str, ...] = (
    CAPABILITIES,
    CAS,
    BYTESTREAM,
    ACTION_CACHE,
    EXECUTION,
    OPERATIONS,
    WORKERS,
    BUILD_EVENTS,
)


def add_servicers(
    server: grpc.aio.Server,
    *,
    config: Config,
    store: BlobStore,
    action_cache: ActionCache,
    instances: Instances,
    engine: ExecutionEngine,
    hub: WorkerHub,
    invocations: InvocationStore | None = None,
) -> None:
    """Add one servicer per entry of SERVICES, each on the parts it needs (the Build
    Event Service only where there is a store for its invocations)."""
    batch = config.cas.max_batch_size
    caps = server_capabilities(
        max_batch_size=batch, exec_enabled=EXECUTION in SERVICES, functions=instances.functions
    )
    re_grpc.add_CapabilitiesServicer_to_server(CapabilitiesServicer(caps, instances), server)
    add_cas_servicer(server, CasServicer(store, instances, batch))
    bs_grpc.add_ByteStreamServicer_to_server(ByteStreamServicer(store, instances), server)
    re_grpc.add_ActionCacheServicer_to_server(ActionCacheServicer(action_cache, instances), server)
    re_grpc.add_ExecutionServicer_to_server(ExecutionServicer(engine, instances), server)
    lro_grpc.add_OperationsServicer_to_server(OperationsServicer(engine, instances), server)
    w_grpc.add_WorkersServicer_to_server(WorkersServicer(hub), server)
    if invocations is not None:
        add_bes_servicer(server, invocations)


def channel_options(config: Config) -> list[tuple[str, Any]]:
    """gRPC options shared by the server and rbs's clients of it."""
    size = config.cas.max_message_size
    return [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", size),
    ]


def _server_options(config: Config) -> list[tuple[str, Any]]:
    g = config.grpc
    return [
        *channel_options(config),
        # Two servers must never share a port silently (the kernel would split calls).
        ("grpc.so_reuseport", 0),
        # Keepalive enforcement: a client may ping with no call in flight, but not more
        # often than min_ping_interval; after max_ping_strikes pings too soon the server
        # sends GOAWAY. Connections idle for max_connection_idle are closed (clients
        # reconnect when they next call). [grpc] in rbs.server.edge_config.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", int(g.min_ping_interval * 1000)),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.max_connection_idle_ms", int(g.max_connection_idle * 1000)),
        # Per connection: calls in flight, and the size of one call's headers.
        ("grpc.max_concurrent_streams", g.max_concurrent_streams),
        ("grpc.max_metadata_size", g.max_metadata_size),
    ]


class RunningServer:
    """A started gRPC server: its port, and a graceful stop (the parts are its builder's)."""

    def __init__(self, server: grpc.aio.Server, config: Config, port: int) -> None:
        self.server = server
        self.port = port
        self.address = f"{config.server.host}:{port}"
        self._stopped = False

    async def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting calls and let in-flight ones finish for `grace` s."""
        if self._stopped:
            return
        self._stopped = True
        await self.server.stop(grace)

    async def wait_for_termination(self) -> None:
        await self.server.wait_for_termination()


async def start_grpc(
    config: Config,
    *,
    store: BlobStore,
    action_cache: ActionCache,
    instances: Instances,
    engine: ExecutionEngine,
    hub: WorkerHub,
    auth: ServerAuth,
    metrics: ServerMetrics | None = None,
    invocations: InvocationStore | None = None,
) -> RunningServer:
    """Build, bind and start the gRPC server; `config.server.port` 0 picks a free port."""
    interceptors: list[grpc.aio.ServerInterceptor] = [  # type: ignore[type-arg]
        AuthInterceptor(auth.authenticate, auth.refusals),
        DecodingInterceptor(),
    ]
    if metrics is not None:  # last: it times the servicer's own work
        interceptors.append(metrics.interceptor())
    server = grpc.aio.server(interceptors=interceptors, options=_server_options(config))
    add_servicers(
        server,
        config=config,
        store=store,
        action_cache=action_cache,
        instances=instances,
        engine=engine,
        hub=hub,
        invocations=invocations,
    )
    address = f"{config.server.host}:{config.server.port}"
    try:
        pair = check_pair(config.server.tls_cert, config.server.tls_key)
        if pair is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, grpc_credentials(*pair))
    except RuntimeError as e:
        raise OSError(
            f"cannot listen on {address}: {e}; is another server using the port? "
            "Pick another with --port (0 picks a free one)"
        ) from None
    await server.start()
    log.info(
        "serving %s on %s:%d (data dir %s, auth %s)",
        ", ".join(name.rsplit(".", 1)[-1] for name in SERVICES),
        config.server.host,
        port,
        config.server.data_dir,
        auth.describe(),
    )
    return RunningServer(server, config, port)
