"""Server assembly: one grpc.aio server hosting every service, built from a Config.

The services a server hosts are listed in one place, `SERVICES`. Each entry names
the gRPC service and a function that adds its servicer to the server, given the
shared `ServerState` (config, data dir, CAS, action cache, instance policy). A
component with its own service appends an entry (or passes its own tuple to
`start_server`); Capabilities advertises execution exactly when an Execution
service is among them:

    async def _add_execution(server: grpc.aio.Server, state: ServerState) -> None:
        servicer = ExecutionServicer(state.store, state.action_cache, ...)
        re_grpc.add_ExecutionServicer_to_server(servicer, server)
        state.on_stop(servicer.close)          # async cleanup at shutdown

    SERVICES = (*SERVICES, Service(name=EXECUTION, add=_add_execution))

`add` functions run inside the event loop before the server starts, so they may
open databases and create background tasks. With a token configured, the bearer
interceptor guards every service alike. State under `data_dir`:

    cas/                the DiskStore (blobs of every digest function)
    action_cache.db     the action cache (SQLite, WAL)

Message size limits are raised to the advertised batch limit plus headroom; blobs
larger than that travel through ByteStream in chunks, in constant memory.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.cas.disk import DiskStore
from rbs.cas.store import BlobStore
from rbs.server.ac_store import ActionResultStore
from rbs.server.action_cache import ActionCache, ActionCacheServicer
from rbs.server.bytestream import ByteStreamServicer
from rbs.server.capabilities import CapabilitiesServicer, server_capabilities
from rbs.server.cas_service import CasServicer
from rbs.server.config import Config
from rbs.server.exec_setup import execution_services
from rbs.server.instances import Instances
from rbs.wire.auth import BearerTokenInterceptor, read_token_file
from rbs.wire.errors import DecodingInterceptor

log = logging.getLogger(__name__)

_REAPI = "build.bazel.remote.execution.v2"
CAPABILITIES = f"{_REAPI}.Capabilities"
CAS = f"{_REAPI}.ContentAddressableStorage"
ACTION_CACHE = f"{_REAPI}.ActionCache"
EXECUTION = f"{_REAPI}.Execution"
BYTESTREAM = "google.bytestream.ByteStream"

Cleanup = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerState:
    """Everything a service registration may use; shared by all servicers of a server."""

    config: Config
    data_dir: Path
    store: BlobStore
    action_cache: ActionCache
    instances: Instances
    service_names: frozenset[str]
    cleanups: list[Cleanup] = field(default_factory=list)

    def on_stop(self, cleanup: Cleanup) -> None:
        """Run `cleanup` when the server stops (after in-flight calls finish)."""
        self.cleanups.append(cleanup)


AddService = Callable[[grpc.aio.Server, ServerState], Awaitable[None] | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """One gRPC service on the server: its full name and how to add its servicer."""

    name: str
    add: AddService


def _add_capabilities(server: grpc.aio.Server, state: ServerState) -> None:
    caps = server_capabilities(
        max_batch_size=state.config.cas.max_batch_size,
        exec_enabled=EXECUTION in state.service_names,
    )
    re_grpc.add_CapabilitiesServicer_to_server(CapabilitiesServicer(caps, state.instances), server)


def _add_cas(server: grpc.aio.Server, state: ServerState) -> None:
    servicer = CasServicer(state.store, state.instances, state.config.cas.max_batch_size)
    re_grpc.add_ContentAddressableStorageServicer_to_server(servicer, server)


def _add_bytestream(server: grpc.aio.Server, state: ServerState) -> None:
    bs_grpc.add_ByteStreamServicer_to_server(
        ByteStreamServicer(state.store, state.instances), server
    )


def _add_action_cache(server: grpc.aio.Server, state: ServerState) -> None:
    servicer = ActionCacheServicer(state.action_cache, state.instances)
    re_grpc.add_ActionCacheServicer_to_server(servicer, server)


# The services every `rbs remote serve` hosts. Execution and rbs's own services
# (Workers, Jobs) register here too, one entry each.
SERVICES: tuple[Service, ...] = (
    Service(name=CAPABILITIES, add=_add_capabilities),
    Service(name=CAS, add=_add_cas),
    Service(name=BYTESTREAM, add=_add_bytestream),
    Service(name=ACTION_CACHE, add=_add_action_cache),
    # Remote execution: Execution and Workers, sharing one worker hub.
    *execution_services(),
)


def channel_options(config: Config) -> list[tuple[str, Any]]:
    """gRPC options shared by the server and rbs's clients of it."""
    size = config.cas.max_message_size
    return [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", size),
    ]


def _server_options(config: Config) -> list[tuple[str, Any]]:
    return [
        *channel_options(config),
        # Two servers must never share a port silently (the kernel would split calls).
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ]


def open_store(config: Config) -> BlobStore:
    """The server's CAS under the data dir, bounded by `[cas] max_size` when set.

    With a bound, every write that takes the store over it evicts least recently used
    blobs outside the lease (`[cas] lease`, 3 h); the action cache drops results whose
    outputs went.
    """
    store = DiskStore(
        config.server.data_dir / "cas", max_size=config.cas.max_size, lease=config.cas.lease
    )
    swept = store.sweep_tmp()
    if swept:
        log.info("removed %d unfinished upload(s) left by an earlier run", swept)
    return store


class RunningServer:
    """A started server: its port, and a graceful stop."""

    def __init__(self, server: grpc.aio.Server, state: ServerState, port: int) -> None:
        self.server = server
        self.state = state
        self.port = port
        self.address = f"{state.config.server.host}:{port}"
        self._results: ActionResultStore = state.action_cache.results
        self._stopped = False

    async def stop(self, grace: float | None = 5.0) -> None:
        """Stop accepting calls, let in-flight ones finish for `grace` s, then clean up."""
        if self._stopped:
            return
        self._stopped = True
        await self.server.stop(grace)
        for cleanup in reversed(self.state.cleanups):
            try:
                await cleanup()
            except Exception:
                log.exception("cleanup at server stop failed")
        self._results.close()

    async def wait_for_termination(self) -> None:
        await self.server.wait_for_termination()


async def start_server(
    config: Config,
    services: Sequence[Service] = SERVICES,
    *,
    store: BlobStore | None = None,
) -> RunningServer:
    """Build, bind and start the server; `config.server.port` 0 picks a free port."""
    data_dir = config.server.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    token = read_token_file(config.server.token_file) if config.server.token_file else None
    interceptors: list[grpc.aio.ServerInterceptor] = [DecodingInterceptor()]  # type: ignore[type-arg]
    if token:
        interceptors.insert(0, BearerTokenInterceptor(token))
    server = grpc.aio.server(interceptors=interceptors, options=_server_options(config))
    cas = store if store is not None else open_store(config)
    results = ActionResultStore(data_dir / "action_cache.db")
    state = ServerState(
        config=config,
        data_dir=data_dir,
        store=cas,
        action_cache=ActionCache(cas, results),
        instances=Instances(config.server.instance_names),
        service_names=frozenset(s.name for s in services),
    )
    try:
        for service in services:
            added = service.add(server, state)
            if inspect.isawaitable(added):
                await added
        address = f"{config.server.host}:{config.server.port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as e:
            raise OSError(
                f"cannot listen on {address}: {e}; is another server using the port? "
                "Pick another with --port (0 picks a free one)"
            ) from None
        await server.start()
    except BaseException:
        results.close()
        raise
    log.info(
        "serving %s on %s:%d (data dir %s, auth %s)",
        ", ".join(s.name.rsplit(".", 1)[-1] for s in services),
        config.server.host,
        port,
        data_dir,
        "on" if token else "off",
    )
    return RunningServer(server, state, port)
