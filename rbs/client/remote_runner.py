"""`rbs build --remote`: run actions on the cluster, or (`--remote-cache-only`) share its cache.

Both modes keep the build's own disk store as a first level in front of the server's
CAS (`TwoLevelStore`): blobs written during the build go through to the server, and
outputs are fetched only when the build needs them locally.

- Remote execution: an action the local memo does not cover is looked up in the
  server's action cache, and on a miss sent to Execute, which runs it on a worker
  (and caches the result there). If the server reports missing inputs (FAILED_PRECONDITION with
  MISSING violations, e.g. after an eviction) the runner uploads them from the local
  store and executes again. A broken stream is resumed with WaitExecution.
- Cache only: actions run locally as usual; results are looked up in and written to
  the server's action cache, outputs uploaded first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from google.longrunning import operations_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.build.backend import StoreBackend
from rbs.build.reapi import FUNCTION, ExecResult, PreparedAction, from_result, to_result
from rbs.build.runner import ActionResultCache, ActionRunner, LocalRunner
from rbs.cas.digests import digest_from_pb, digest_to_pb, function_to_pb
from rbs.cas.store import BlobStore
from rbs.cas.twolevel import TwoLevelStore
from rbs.model import Digest
from rbs.wire.auth import auth_metadata
from rbs.wire.reapi_client import ActionCacheClient, RemoteError, RemoteStore, connect

log = logging.getLogger(__name__)

_ATTEMPTS = 3
# Output streams larger than this are left out of a remote result (they stay in the CAS).
_STREAM_LIMIT = 1 << 20


class RemoteExecutionFailed(RuntimeError):
    """The cluster could not run an action (not: the action failed); says why."""


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
        return _to_exec_result(ar, action, self._store, cached=True)

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
        self._stub = re_grpc.ExecutionStub(channel)
        self._store = store
        self._metadata = auth_metadata(token)
        self._instance = instance

    def execute(self, action: PreparedAction) -> ExecResult:
        for attempt in range(1, _ATTEMPTS + 1):
            resp = self._execute(action.digest)
            missing = _missing_blobs(resp.status)
            if resp.status.code == code_pb2.FAILED_PRECONDITION and missing:
                log.info("server lacks %d input blob(s); uploading (try %d)", len(missing), attempt)
                self._store.push(missing)
                continue
            return self._result(action, resp)
        raise RemoteExecutionFailed(
            f"the server kept reporting missing inputs for action {action.digest} after "
            f"{_ATTEMPTS} uploads: {resp.status.message}"
        )

    def _result(self, action: PreparedAction, resp: re_pb2.ExecuteResponse) -> ExecResult:
        code = resp.status.code
        if code not in (code_pb2.OK, code_pb2.DEADLINE_EXCEEDED):
            name = code_pb2.Code.Name(code) if code in code_pb2.Code.values() else str(code)
            raise RemoteExecutionFailed(
                f"remote execution of {action.digest} failed: {name}: {resp.status.message}"
            )
        res = _to_exec_result(resp.result, action, self._store, cached=resp.cached_result)
        if code == code_pb2.DEADLINE_EXCEEDED:
            note = f"rbs: {resp.status.message}\n".encode()
            return ExecResult(
                exit_code=res.exit_code or 124,
                outputs=res.outputs,
                stdout=res.stdout,
                stderr=res.stderr + note,
                missing=res.missing,
            )
        return res

    def _execute(self, digest: Digest) -> re_pb2.ExecuteResponse:
        request = re_pb2.ExecuteRequest(
            instance_name=self._instance,
            action_digest=digest_to_pb(digest),
            digest_function=function_to_pb(digest.function),
        )
        name = ""
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                if name:
                    stream = self._stub.WaitExecution(
                        re_pb2.WaitExecutionRequest(name=name), metadata=self._metadata
                    )
                else:
                    stream = self._stub.Execute(request, metadata=self._metadata)
                for op in stream:
                    name = op.name
                    if op.done:
                        return _response(op)
                raise RemoteExecutionFailed(f"the Execute stream for {digest} ended early")
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else grpc.StatusCode.UNKNOWN
                if code == grpc.StatusCode.NOT_FOUND and name:
                    name = ""  # the server forgot the operation: execute again
                elif code != grpc.StatusCode.UNAVAILABLE or attempt == _ATTEMPTS:
                    raise RemoteError(f"executing {digest}", e) from None
                time.sleep(0.2 * attempt)  # back off before reconnecting
        raise RemoteExecutionFailed(f"could not execute {digest}")


def _response(op: operations_pb2.Operation) -> re_pb2.ExecuteResponse:
    resp = re_pb2.ExecuteResponse()
    if op.HasField("error"):
        # Servers must not set Operation.error, but some do: treat it as the status.
        resp.status.CopyFrom(op.error)
    elif not op.response.Unpack(resp):
        raise RemoteExecutionFailed(f"operation {op.name} finished without an ExecuteResponse")
    return resp


def _missing_blobs(status: status_pb2.Status) -> list[Digest]:
    out: list[Digest] = []
    for detail in status.details:
        failure = error_details_pb2.PreconditionFailure()
        if not detail.Unpack(failure):
            continue
        for v in failure.violations:
            if v.type != "MISSING":
                continue
            parts = v.subject.split("/")
            try:
                out.append(Digest(function=FUNCTION, hash=parts[-2], size=int(parts[-1])))
            except (IndexError, ValueError):
                log.warning("cannot read missing-blob subject %r", v.subject)
    return out


def _stream(store: BlobStore, raw: bytes, digest: re_pb2.Digest) -> bytes:
    if raw or not digest.hash or digest.size_bytes > _STREAM_LIMIT:
        return raw
    return store.get(digest_from_pb(digest, FUNCTION))


def _to_exec_result(
    ar: re_pb2.ActionResult, action: PreparedAction, store: BlobStore, *, cached: bool
) -> ExecResult:
    wd = action.spec.working_directory
    res = from_result(ar, wd, cached=cached)
    got = {o.path for o in res.outputs}
    declared = [f"{wd}/{p}" if wd else p for p in action.command.output_files]
    return ExecResult(
        exit_code=res.exit_code,
        outputs=res.outputs,
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
