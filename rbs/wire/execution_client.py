"""A typed synchronous client of REAPI Execution: Execute, resumed with WaitExecution, decoded.

    execution = ExecutionClient(connect("grpc://127.0.0.1:8980"))
    outcome = execution.execute(action_digest)        # an ExecuteOutcome, never protobuf
    if outcome.missing: ...                            # upload them, then execute again
    outcome.result.exit_code, outcome.result.output_files, outcome.cached

Execute streams Operations until one is done. A stream that breaks (UNAVAILABLE) is
resumed with WaitExecution on the operation's name after a short back-off, three tries
in all; a server that forgot the operation (NOT_FOUND) is asked to Execute again. The
last Operation's ExecuteResponse is decoded into an `ExecuteOutcome`: the status as a
code and message, the inputs the server lacks (PreconditionFailure MISSING violations),
and the ActionResult as a `RemoteActionResult` (`read_action_result`, also for what
rbs.wire.reapi_client.ActionCacheClient returns), so nothing above rbs.wire reads an
Execution message. Digests in the answer take the action digest's function.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
from google.longrunning import operations_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import digest_from_pb, digest_to_pb, function_to_pb
from rbs.model import Digest, DigestFunction
from rbs.wire.auth import auth_metadata, token_from_env
from rbs.wire.reapi_client import RemoteError

log = logging.getLogger(__name__)

ATTEMPTS = 3
_OK: int = code_pb2.OK
_DEADLINE_EXCEEDED: int = code_pb2.DEADLINE_EXCEEDED
_FAILED_PRECONDITION: int = code_pb2.FAILED_PRECONDITION


class RemoteExecutionFailed(RuntimeError):
    """The cluster could not run an action (not: the action failed); says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteOutputFile:
    """One output file of a result, its path relative to the command's working directory."""

    path: str
    digest: Digest
    is_executable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteOutputDirectory:
    """One output directory of a result: its Tree message (and root, when the server says)."""

    path: str
    tree_digest: Digest
    root_digest: Digest | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteActionResult:
    """An ActionResult as a REAPI server answers it: each stream inline, by digest, or both."""

    exit_code: int = 0
    output_files: tuple[RemoteOutputFile, ...] = ()
    stdout_raw: bytes = b""
    stderr_raw: bytes = b""
    stdout_digest: Digest | None = None
    stderr_digest: Digest | None = None
    output_directories: tuple[RemoteOutputDirectory, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteOutcome:
    """The ExecuteResponse an Execute call ended with."""

    code: int  # a google.rpc.Code value; 0 is OK
    message: str = ""
    cached: bool = False
    result: RemoteActionResult = RemoteActionResult()
    # The inputs the server lacks (FAILED_PRECONDITION): upload them and execute again.
    missing: tuple[Digest, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == _OK

    @property
    def timed_out(self) -> bool:
        """The action ran past its timeout; the result holds what it did until then."""
        return self.code == _DEADLINE_EXCEEDED

    @property
    def code_name(self) -> str:
        """The status code's name (`INTERNAL`), or its number when rbs does not know it."""
        code = self.code
        return code_pb2.Code.Name(code) if code in code_pb2.Code.values() else str(code)


def read_action_result(ar: re_pb2.ActionResult, function: DigestFunction) -> RemoteActionResult:
    """An ActionResult message as the typed value; its digests use `function`."""
    return RemoteActionResult(
        exit_code=ar.exit_code,
        output_files=tuple(
            RemoteOutputFile(
                path=f.path,
                digest=digest_from_pb(f.digest, function),
                is_executable=f.is_executable,
            )
            for f in ar.output_files
        ),
        output_directories=tuple(
            RemoteOutputDirectory(
                path=d.path,
                tree_digest=digest_from_pb(d.tree_digest, function),
                root_digest=digest_from_pb(d.root_directory_digest, function)
                if d.root_directory_digest.hash
                else None,
            )
            for d in ar.output_directories
        ),
        stdout_raw=ar.stdout_raw,
        stderr_raw=ar.stderr_raw,
        stdout_digest=digest_from_pb(ar.stdout_digest, function) if ar.stdout_digest.hash else None,
        stderr_digest=digest_from_pb(ar.stderr_digest, function) if ar.stderr_digest.hash else None,
    )


def _missing_blobs(status: status_pb2.Status, function: DigestFunction) -> tuple[Digest, ...]:
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
                out.append(Digest(function=function, hash=parts[-2], size=int(parts[-1])))
            except (IndexError, ValueError):
                log.warning("cannot read missing-blob subject %r", v.subject)
    return tuple(out)


def read_operation(op: operations_pb2.Operation, function: DigestFunction) -> ExecuteOutcome:
    """A finished Operation of Execute or WaitExecution as the typed outcome."""
    resp = re_pb2.ExecuteResponse()
    if op.HasField("error"):
        # Servers must not set Operation.error, but some do: treat it as the status.
        resp.status.CopyFrom(op.error)
    elif not op.response.Unpack(resp):
        raise RemoteExecutionFailed(f"operation {op.name} finished without an ExecuteResponse")
    code = resp.status.code
    return ExecuteOutcome(
        code=code,
        message=resp.status.message,
        cached=resp.cached_result,
        result=read_action_result(resp.result, function),
        missing=_missing_blobs(resp.status, function) if code == _FAILED_PRECONDITION else (),
    )


class ExecutionClient:
    """Execute and WaitExecution against one instance; every call carries the token."""

    def __init__(self, channel: grpc.Channel, *, instance: str = "", token: str | None = None):
        self._stub = re_grpc.ExecutionStub(channel)
        self._metadata = auth_metadata(token if token is not None else token_from_env())
        self.instance = instance

    def execute(self, action: Digest, *, skip_cache_lookup: bool = False) -> ExecuteOutcome:
        """Run `action` (or find it in the server's cache) and wait for its outcome."""
        request = re_pb2.ExecuteRequest(
            instance_name=self.instance,
            action_digest=digest_to_pb(action),
            skip_cache_lookup=skip_cache_lookup,
            digest_function=function_to_pb(action.function),
        )
        name = ""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                stream = self._wait_stream(name) if name else self._execute_stream(request)
                for op in stream:
                    name = op.name
                    if op.done:
                        return read_operation(op, action.function)
                raise RemoteExecutionFailed(f"the Execute stream for {action} ended early")
            except grpc.RpcError as e:
                code = e.code() if isinstance(e, grpc.Call) else grpc.StatusCode.UNKNOWN
                if code == grpc.StatusCode.NOT_FOUND and name:
                    name = ""  # the server forgot the operation: execute again
                elif code != grpc.StatusCode.UNAVAILABLE or attempt == ATTEMPTS:
                    raise RemoteError(f"executing {action}", e) from None
                time.sleep(0.2 * attempt)  # back off before reconnecting
        raise RemoteExecutionFailed(f"could not execute {action}")

    def wait(self, operation: str, function: DigestFunction) -> ExecuteOutcome:
        """Wait for an operation an earlier Execute started (by its name) to finish."""
        try:
            for op in self._wait_stream(operation):
                if op.done:
                    return read_operation(op, function)
        except grpc.RpcError as e:
            raise RemoteError(f"waiting for operation {operation}", e) from None
        raise RemoteExecutionFailed(f"the WaitExecution stream for {operation} ended early")

    def _execute_stream(self, request: re_pb2.ExecuteRequest) -> Iterator[operations_pb2.Operation]:
        stream: Iterator[operations_pb2.Operation] = self._stub.Execute(
            request, metadata=self._metadata
        )
        return stream

    def _wait_stream(self, name: str) -> Iterator[operations_pb2.Operation]:
        stream: Iterator[operations_pb2.Operation] = self._stub.WaitExecution(
            re_pb2.WaitExecutionRequest(name=name), metadata=self._metadata
        )
        return stream
