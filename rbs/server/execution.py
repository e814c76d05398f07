"""REAPI Execution: Execute and WaitExecution over the operation registry and the workers.

Execute, in order: look the action up in the action cache (unless
skip_cache_lookup); join an identical action already in flight; check that every
blob the action needs is in the CAS (the Action, its Command, the whole input tree);
then create an operation and queue it for a worker's build slot. Every caller of the
same operation streams the same updates (QUEUED, EXECUTING, COMPLETED).

As the spec says, `Operation.error` is never set: a failed execution is a done
operation whose ExecuteResponse.status says what happened (FAILED_PRECONDITION with a
PreconditionFailure listing each missing blob; DEADLINE_EXCEEDED for a timeout;
INTERNAL when workers kept getting lost). Only a malformed request is a gRPC error.
A result is stored in the action cache only when the action exited 0, asked to be
cached, and every output it names is in the CAS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.longrunning import operations_pb2
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import digest_to_pb, function_to_pb
from rbs.cas.errors import BlobNotFound, InvalidTree
from rbs.cas.store import BlobStore
from rbs.model import Digest, DigestFunction
from rbs.scheduler.dispatch_events import Lease, QueuedAction
from rbs.server.action_cache import ActionCache
from rbs.server.instances import Instances
from rbs.server.operations import (
    KEEP_DONE_S,
    Operation,
    OperationInFlight,
    OperationRegistry,
    Stage,
    UnknownOperation,
)
from rbs.server.workers_service import WorkerHub
from rbs.wire.errors import (
    FailedPrecondition,
    InvalidRequest,
    MissingBlobs,
    NotFound,
    rpc_errors,
)
from rbs.wire.reapi import digest_from_proto, request_function

log = logging.getLogger(__name__)

_TYPE_PREFIX = "type.googleapis.com/"
_RESPONSE_URL = _TYPE_PREFIX + re_pb2.ExecuteResponse.DESCRIPTOR.full_name
# How long a verified-complete input root is trusted without checking the CAS again.
_COMPLETE_TTL_S = 600.0
_COMPLETE_MAX = 10_000
_PRUNE_EVERY_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecuteArgs:
    action_digest: Digest
    instance: str = ""
    skip_cache_lookup: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionLimits:
    default_timeout_s: float = 3600.0
    max_timeout_s: float = 24 * 3600.0
    keepalive_s: float = 30.0


class ExecutionEngine:
    """Execute's logic; the hub reports lease progress back through ActionEvents.

    The hub and the engine need each other: whoever builds the server creates the hub,
    then the engine on it, then hands the engine to the hub (`WorkerHub.set_listeners`).
    """

    def __init__(
        self,
        *,
        cas: BlobStore,
        results: ActionCache,
        registry: OperationRegistry,
        hub: WorkerHub,
        limits: ExecutionLimits | None = None,
    ) -> None:
        self._cas = cas
        self._results = results
        self._registry = registry
        self._hub = hub
        self.limits = limits or ExecutionLimits()
        self._complete_roots: dict[Digest, float] = {}
        self._last_prune = time.monotonic()

    # ------------------------------------------------------------------ startup

    def restore(self) -> int:
        """Reload persisted operations; in-flight ones go back to their workers (if
        those reconnect in time) or to the queue. Returns how many are in flight."""
        store = self._registry.store
        pending = self._registry.restore(store.load(keep_done_since=time.time() - KEEP_DONE_S))
        leases = []
        for op in pending:
            try:
                timeout = self._timeout_of(self._read_action(op.action_digest))
            except Exception as e:  # the action vanished or is unreadable: finish it
                self._finish(op.name, _status(code_pb2.INTERNAL, f"cannot re-queue: {e}"))
                continue
            action = QueuedAction(
                operation=op.name,
                action_digest=op.action_digest,
                timeout_s=timeout,
                attempt=op.attempt,
            )
            if op.worker_id and op.lease_id:
                leases.append(Lease(lease_id=op.lease_id, worker_id=op.worker_id, action=action))
            else:
                self._hub.submit(action)
        self._hub.restore(store.load_workers(), leases)
        if pending:
            log.info("restored %d operation(s) in flight", len(pending))
        return len(pending)

    # ------------------------------------------------------------------ Execute

    async def execute(self, args: ExecuteArgs) -> Operation:
        digest, instance = args.action_digest, args.instance
        self._maybe_prune()
        if not args.skip_cache_lookup:
            hit = await asyncio.to_thread(self._cached, instance, digest)
            if hit is not None:
                response = re_pb2.ExecuteResponse(
                    result=hit, cached_result=True, status=_status(code_pb2.OK, "")
                )
                return self._registry.create(
                    digest,
                    instance=instance,
                    stage=Stage.COMPLETED,
                    response=response.SerializeToString(),
                    persist=False,
                )
        joined = self._registry.inflight(instance, digest)
        if joined is not None:
            return joined
        missing, action = await asyncio.to_thread(self._check_inputs, digest)
        if missing:
            status = _missing_status(missing)
            response = re_pb2.ExecuteResponse(status=status, message=status.message)
            return self._registry.create(
                digest,
                instance=instance,
                stage=Stage.COMPLETED,
                response=response.SerializeToString(),
                persist=False,
            )
        assert action is not None
        timeout = self._timeout_of(action)
        # Another caller may have queued the same action while we checked inputs.
        joined = self._registry.inflight(instance, digest)
        if joined is not None:
            return joined
        op = self._registry.create(
            digest, instance=instance, stage=Stage.QUEUED, skip_cache_lookup=args.skip_cache_lookup
        )
        self._hub.submit(QueuedAction(operation=op.name, action_digest=digest, timeout_s=timeout))
        return op

    def _maybe_prune(self) -> None:
        # Finished operations stay answerable for KEEP_DONE_S; forget older ones.
        now = time.monotonic()
        if now - self._last_prune >= _PRUNE_EVERY_S:
            self._last_prune = now
            self._registry.prune(older_than=time.time() - KEEP_DONE_S)

    def watch(self, name: str) -> AsyncIterator[Operation]:
        return self._registry.watch(name, keepalive=self.limits.keepalive_s)

    def get(self, name: str) -> Operation:
        return self._registry.get(name)

    def operations(self, instance: str) -> list[Operation]:
        return self._registry.of_instance(instance)

    def cancel(self, name: str) -> None:
        """CancelOperation: finish it with CANCELLED (its lease is cancelled on the worker)."""
        if not self._registry.get(name).done:
            self._finish(name, _status(code_pb2.CANCELLED, "cancelled by CancelOperation"))

    def forget(self, name: str) -> None:
        try:
            self._registry.forget(name)
        except OperationInFlight as e:
            raise FailedPrecondition(str(e)) from None

    def _cached(self, instance: str, digest: Digest) -> re_pb2.ActionResult | None:
        # lookup() returns only results whose outputs are all still in the CAS.
        try:
            return self._results.lookup(instance, digest)
        except NotFound:
            return None

    def _read_action(self, digest: Digest) -> re_pb2.Action:
        try:
            return self._cas.get_message(digest, re_pb2.Action())
        except DecodeError:
            raise InvalidRequest(f"action {digest} is not a valid Action message") from None

    def _timeout_of(self, action: re_pb2.Action) -> float:
        t = action.timeout.seconds + action.timeout.nanos / 1e9
        if t < 0:
            raise InvalidRequest(f"the action's timeout is negative ({t}s)")
        if t > self.limits.max_timeout_s:
            raise InvalidRequest(
                f"the action's timeout {t:g}s exceeds this server's maximum of "
                f"{self.limits.max_timeout_s:g}s; lower it"
            )
        return t or self.limits.default_timeout_s

    def _check_inputs(self, digest: Digest) -> tuple[list[Digest], re_pb2.Action | None]:
        """Every blob the action needs that the CAS lacks (empty: all present)."""
        if self._cas.find_missing([digest]):
            return [digest], None
        action = self._read_action(digest)
        fn = digest.function
        if not action.HasField("command_digest") or not action.HasField("input_root_digest"):
            raise InvalidRequest(f"action {digest} lacks a command_digest or input_root_digest")
        command_digest = digest_from_proto(action.command_digest, fn, "command_digest")
        root = digest_from_proto(action.input_root_digest, fn, "input_root_digest")
        missing = self._cas.find_missing([command_digest])
        if not missing:
            try:
                command = self._cas.get_message(command_digest, re_pb2.Command())
            except DecodeError:
                raise InvalidRequest(f"command {command_digest} is not a valid Command") from None
            if not command.arguments:
                raise InvalidRequest(f"command {command_digest} has no arguments: nothing to run")
        missing += self._missing_in_tree(root)
        return missing, action

    def _missing_in_tree(self, root: Digest) -> list[Digest]:
        now = time.monotonic()
        seen = self._complete_roots.get(root)
        if seen is not None and now - seen < _COMPLETE_TTL_S:
            return []
        missing: list[Digest] = []
        level = [root]
        while level:
            absent = set(self._cas.find_missing(level))
            missing += sorted(absent, key=str)
            files: list[Digest] = []
            below: list[Digest] = []
            for d in level:
                if d in absent or d.size == 0:
                    continue
                directory = re_pb2.Directory()
                try:
                    directory.ParseFromString(self._cas.get(d))
                except DecodeError:
                    raise InvalidRequest(f"input directory {d} is not a Directory") from None
                except BlobNotFound:
                    missing.append(d)
                    continue
                for f in directory.files:
                    files.append(digest_from_proto(f.digest, d.function, f"file {f.name!r}"))
                for sub in directory.directories:
                    below.append(digest_from_proto(sub.digest, d.function, f"dir {sub.name!r}"))
            missing += self._cas.find_missing(files)
            level = below
        if not missing:
            if len(self._complete_roots) >= _COMPLETE_MAX:
                self._complete_roots.clear()
            self._complete_roots[root] = now
        return missing

    # ------------------------------------------------------------------ ActionEvents

    def action_leased(self, lease: Lease) -> None:
        self._registry.update(
            lease.action.operation,
            stage=Stage.QUEUED,
            worker_id=lease.worker_id,
            lease_id=lease.lease_id,
            attempt=lease.action.attempt,
        )

    def action_started(self, lease: Lease) -> None:
        self._registry.update(lease.action.operation, stage=Stage.EXECUTING)

    async def action_finished(
        self, operation: str, status: status_pb2.Status, result: re_pb2.ActionResult
    ) -> None:
        try:
            op = self._registry.get(operation)
        except UnknownOperation:
            return
        if op.done:
            return
        try:
            status = await asyncio.to_thread(self._store_result, op, status, result)
        except Exception as e:
            log.exception("storing the result of %s failed", operation)
            status = _status(code_pb2.INTERNAL, f"storing the action's result failed: {e}")
        self._finish(operation, status, result)

    def action_failed(self, operation: str, message: str) -> None:
        self._finish(operation, _status(code_pb2.INTERNAL, message))

    def _store_result(
        self, op: Operation, status: status_pb2.Status, result: re_pb2.ActionResult
    ) -> status_pb2.Status:
        """Check the outputs are all in the CAS, then cache the result if allowed."""
        try:
            missing = self._results.missing_outputs(result, op.action_digest.function)
        except (InvalidRequest, InvalidTree, BlobNotFound, DecodeError) as e:
            return _status(code_pb2.INTERNAL, f"the worker reported an unusable result: {e}")
        if missing:
            shown = ", ".join(str(d) for d in missing[:3])
            return _status(
                code_pb2.INTERNAL,
                f"the worker reported outputs that are not in the CAS ({shown}); "
                "the result was not cached",
            )
        if status.code != code_pb2.OK or result.exit_code != 0:
            return status
        action = self._read_action(op.action_digest)
        if not action.do_not_cache:
            self._results.update(op.instance, op.action_digest, result)
        return status

    def _finish(
        self,
        operation: str,
        status: status_pb2.Status,
        result: re_pb2.ActionResult | None = None,
    ) -> None:
        response = re_pb2.ExecuteResponse(status=status, message=status.message)
        if result is not None:
            response.result.CopyFrom(result)
        self._registry.complete(operation, response.SerializeToString())
        self._hub.complete(operation)


def _status(code: int, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code, message=message)


def _missing_status(missing: list[Digest]) -> status_pb2.Status:
    """FAILED_PRECONDITION naming each missing blob the way ByteStream.Read would
    (`blobs/{function/}{hash}/{size}`, the function only where the hash is ambiguous)."""
    status = _status(code_pb2.FAILED_PRECONDITION, str(MissingBlobs(missing, "action")))
    failure = error_details_pb2.PreconditionFailure()
    for d in missing:
        fn = "" if d.function is DigestFunction.SHA256 else f"{d.function.value}/"
        failure.violations.add(type="MISSING", subject=f"blobs/{fn}{d.hash}/{d.size}")
    status.details.add().Pack(failure)
    return status


def operation_to_proto(op: Operation) -> operations_pb2.Operation:
    out = operations_pb2.Operation(name=op.name, done=op.done)
    out.metadata.Pack(
        re_pb2.ExecuteOperationMetadata(
            stage=int(op.stage),
            action_digest=digest_to_pb(op.action_digest),
            digest_function=function_to_pb(op.action_digest.function),
        )
    )
    if op.done and op.response is not None:
        # Relay the stored bytes as they are: no need to parse and re-serialize.
        out.response.type_url = _RESPONSE_URL
        out.response.value = op.response
    return out


class ExecutionServicer(re_grpc.ExecutionServicer):  # type: ignore[misc]
    """The gRPC edge of the engine."""

    def __init__(self, engine: ExecutionEngine, instances: Instances) -> None:
        self._engine = engine
        self._instances = instances

    @rpc_errors
    async def Execute(
        self, request: re_pb2.ExecuteRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[operations_pb2.Operation]:
        instance = self._instances.check(request.instance_name)
        if not request.HasField("action_digest"):
            raise InvalidRequest("ExecuteRequest.action_digest is required")
        fn = request_function(request.digest_function, request.action_digest)
        self._instances.check_function(fn)
        digest = digest_from_proto(request.action_digest, fn, "action_digest")
        op = await self._engine.execute(
            ExecuteArgs(
                action_digest=digest,
                instance=instance,
                skip_cache_lookup=request.skip_cache_lookup,
            )
        )
        if op.done:  # answered at once (cache hit, missing inputs): one message
            yield operation_to_proto(op)
            return
        async for update in self._engine.watch(op.name):
            yield operation_to_proto(update)

    @rpc_errors
    async def WaitExecution(
        self, request: re_pb2.WaitExecutionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[operations_pb2.Operation]:
        try:
            self._engine.get(request.name)
        except UnknownOperation as e:
            raise NotFound(str(e)) from None
        async for update in self._engine.watch(request.name):
            yield operation_to_proto(update)
