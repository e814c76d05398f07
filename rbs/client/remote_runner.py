"""`rbs build --remote`: run actions on the cluster, or (`--remote-cache-only`) share its cache.

Both modes keep the build's own disk store as a first level in front of the server's
CAS (`TwoLevelStore`): blobs written during the build go through to the server, and
outputs are fetched only when the build needs them locally.

- Remote execution: an action the local memo does not cover is looked up in the
  server's action cache, and on a miss sent to Execute, which runs it on a worker
  (and caches the result there). If the server reports missing inputs (FAILED_PRECONDITION with
  MISSING violations, e.g. after an eviction) the runner uploads them from the local
  store and executes again. A broken stream is resumed with WaitExecution
  (rbs.wire.execution_client, which also decodes the answer: no protobuf here).
- Cache only: actions run locally as usual; results are looked up in and written to
  the server's action cache, outputs uploaded first.

Before anything else the client reads the server's Capabilities (`negotiate`): the
digest function (BLAKE3 when offered, else SHA256, or the one `--digest-function`
forces), the batch size limit, zstd for ByteStream, for the instance name given. A
server that does not hash with BLAKE3 gets its actions through a DigestBridge: the
build's own state stays BLAKE3 (rbs.cas.bridge says why).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from rbs.build.backend import StoreBackend
from rbs.build.reapi import ExecResult, OutputFile, PreparedAction, to_result
from rbs.build.runner import ActionResultCache, ActionRunner, LocalRunner
from rbs.build.trees import OutputDir
from rbs.cas.store import BlobStore
from rbs.cas.twolevel import TwoLevelStore
from rbs.model import Digest, DigestFunction
from rbs.wire.execution_client import (
    ExecuteOutcome,
    ExecutionClient,
    RemoteActionResult,
    RemoteExecutionFailed,
    read_action_result,
)
from rbs.wire.limits import DEFAULT_BATCH_SIZE, MESSAGE_HEADROOM
from rbs.wire.reapi_client import ActionCacheClient, RemoteStore, connect
from rbs.wire.remote_caps import ServerOffer, choose_function, read_offer

log = logging.getLogger(__name__)

_ATTEMPTS = 3
# Output streams larger than this are left out of a remote result (they stay in the CAS).
_STREAM_LIMIT = 1 << 20


class RemoteActionCache(ActionResultCache):
    """The server's action cache. With remote execution it is only read (the server
    caches what its workers run); with `--remote-cache-only` local results go in."""

    def __init__(self, client: ActionCacheClient, store: BlobStore, *, writable: bool) -> None:
        self._client = client
        self._store = store
        self._writable = writable

    def get(self, action: PreparedAction) -> ExecResult | None:
        ar = self._client.get(action.digest)
        if ar is None:
            return None
        result = read_action_result(ar, action.digest.function)
        return _to_exec_result(result, action, self._store, cached=True)

    def put(self, action: PreparedAction, result: ExecResult) -> None:
        if not self._writable:
            return
        # The outputs were written through the two-level store, so the server has them.
        self._client.update(action.digest, to_result(result, action.spec.working_directory))


class RemoteRunner(ActionRunner):
    """Runs prepared actions with REAPI Execute on the server."""

    def __init__(
        self,
        channel: grpc.Channel,
        store: TwoLevelStore,
        *,
        token: str | None = None,
        instance: str = "",
    ) -> None:
        self._execution = ExecutionClient(channel, instance=instance, token=token)
        self._store = store

    def execute(self, action: PreparedAction) -> ExecResult:
        for attempt in range(1, _ATTEMPTS + 1):
            outcome = self._execution.execute(action.digest)
            if outcome.missing:
                log.info(
                    "server lacks %d input blob(s); uploading (try %d)",
                    len(outcome.missing),
                    attempt,
                )
                self._store.push(list(outcome.missing))
                continue
            return self._result(action, outcome)
        raise RemoteExecutionFailed(
            f"the server kept reporting missing inputs for action {action.digest} after "
            f"{_ATTEMPTS} uploads: {outcome.message}"
        )

    def _result(self, action: PreparedAction, outcome: ExecuteOutcome) -> ExecResult:
        if not (outcome.ok or outcome.timed_out):
            raise RemoteExecutionFailed(
                f"remote execution of {action.digest} failed: {outcome.code_name}: "
                f"{outcome.message}"
            )
        res = _to_exec_result(outcome.result, action, self._store, cached=outcome.cached)
        if outcome.timed_out:
            note = f"rbs: {outcome.message}\n".encode()
            return ExecResult(
                exit_code=res.exit_code or 124,
                outputs=res.outputs,
                stdout=res.stdout,
                stderr=res.stderr + note,
                missing=res.missing,
                dirs=res.dirs,
            )
        return res


def _stream(store: BlobStore, raw: bytes, digest: Digest | None) -> bytes:
    if raw or digest is None or digest.size > _STREAM_LIMIT:
        return raw
    return store.get(digest)


def _to_exec_result(
    ar: RemoteActionResult, action: PreparedAction, store: BlobStore, *, cached: bool
) -> ExecResult:
    wd = action.spec.working_directory
    outputs = tuple(
        OutputFile(
            path=f"{wd}/{f.path}" if wd else f.path, digest=f.digest, executable=f.is_executable
        )
        for f in ar.output_files
    )
    dirs = tuple(
        OutputDir(path=f"{wd}/{d.path}" if wd else d.path, tree=d.tree_digest, root=d.root_digest)
        for d in ar.output_directories
    )
    got = {o.path for o in outputs} | {d.path for d in dirs}
    declared = [
        f"{wd}/{p}" if wd else p
        for p in (*action.command.output_files, *action.command.output_directories)
    ]
    return ExecResult(
        exit_code=ar.exit_code,
        outputs=outputs,
        stdout=_stream(store, ar.stdout_raw, ar.stdout_digest),
        stderr=_stream(store, ar.stderr_raw, ar.stderr_digest),
        cached=cached,
        missing=tuple(p for p in declared if p not in got),
        dirs=dirs,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteSetup:
    """What a build agreed with the server before its first action."""

    target: str
    token: str | None
    instance: str
    function: DigestFunction
    offer: ServerOffer
    cache_only: bool

    @property
    def max_batch_size(self) -> int:
        theirs = self.offer.max_batch_size
        return min(theirs, DEFAULT_BATCH_SIZE) if theirs > 0 else DEFAULT_BATCH_SIZE


def negotiate(
    target: str,
    *,
    token: str | None,
    cache_only: bool = False,
    instance: str = "",
    function: DigestFunction | None = None,
) -> RemoteSetup:
    """Read the server's Capabilities and choose what to use (RemoteError when it cannot
    be reached, UnsupportedServer when it cannot serve this build)."""
    channel = connect(target)
    try:
        offer = read_offer(channel, instance=instance, token=token)
    finally:
        channel.close()
    chosen = choose_function(offer, forced=function, execution=not cache_only)
    return RemoteSetup(
        target=target,
        token=token,
        instance=instance,
        function=chosen,
        offer=offer,
        cache_only=cache_only,
    )


def remote_backend(setup: RemoteSetup) -> Callable[[Path], StoreBackend]:
    """A backend factory for BuildOptions: the build's store over the server's CAS, and
    either remote execution or local execution with the server's action cache."""
    from rbs.build.reapi import FUNCTION
    from rbs.cas.bridge import DigestBridge
    from rbs.cas.disk import DiskStore

    def factory(root: Path) -> StoreBackend:
        channel = connect(setup.target, max_message_size=setup.max_batch_size + MESSAGE_HEADROOM)
        token, instance = setup.token, setup.instance
        remote = RemoteStore(
            channel,
            instance=instance,
            token=token,
            max_batch_size=setup.max_batch_size,
            zstd=setup.offer.zstd,
        )
        local = DiskStore(root / ".rbs" / "cas", durable=False)
        bridge = None
        if setup.function is not FUNCTION:
            store = TwoLevelStore(local, remote, remote_functions=[setup.function])
            bridge = DigestBridge(store, local=FUNCTION, remote=setup.function)
        else:
            store = TwoLevelStore(local, remote)
        cache = RemoteActionCache(
            ActionCacheClient(channel, instance=instance, token=token),
            store,
            writable=setup.cache_only and setup.offer.update_enabled,
        )
        runner: ActionRunner
        if setup.cache_only:
            runner = LocalRunner(store, root / ".rbs" / "sandbox")
        else:
            runner = RemoteRunner(channel, store, token=token, instance=instance)
        return StoreBackend(root, store, cache, runner, bridge=bridge)

    return factory
