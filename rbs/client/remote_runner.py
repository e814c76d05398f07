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
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from rbs.build.backend import StoreBackend
from rbs.build.reapi import ExecResult, OutputFile, PreparedAction, to_result
from rbs.build.runner import ActionResultCache, ActionRunner, LocalRunner
from rbs.cas.store import BlobStore
from rbs.cas.twolevel import TwoLevelStore
from rbs.model import Digest
from rbs.wire.execution_client import (
    ExecuteOutcome,
    ExecutionClient,
    RemoteActionResult,
    RemoteExecutionFailed,
    read_action_result,
)
from rbs.wire.reapi_client import ActionCacheClient, RemoteStore, connect

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
    got = {o.path for o in outputs}
    declared = [f"{wd}/{p}" if wd else p for p in action.command.output_files]
    return ExecResult(
        exit_code=ar.exit_code,
        outputs=outputs,
        stdout=_stream(store, ar.stdout_raw, ar.stdout_digest),
        stderr=_stream(store, ar.stderr_raw, ar.stderr_digest),
        cached=cached,
        missing=tuple(p for p in declared if p not in got),
    )


def remote_backend(
    target: str, *, token: str | None, cache_only: bool = False
) -> Callable[[Path], StoreBackend]:
    """A backend factory for BuildOptions: the build's store over the server's CAS, and
    either remote execution or local execution with the server's action cache."""
    from rbs.cas.disk import DiskStore

    def factory(root: Path) -> StoreBackend:
        channel = connect(target)
        remote = RemoteStore(channel, token=token)
        local = DiskStore(root / ".rbs" / "cas", durable=False)
        store = TwoLevelStore(local, remote)
        cache = RemoteActionCache(
            ActionCacheClient(channel, token=token), store, writable=cache_only
        )
        runner: ActionRunner
        if cache_only:
            runner = LocalRunner(store, root / ".rbs" / "sandbox")
        else:
            runner = RemoteRunner(channel, store, token=token)
        return StoreBackend(root, store, cache, runner)

    return factory
