"""google.longrunning.Operations over the execution engine: what `bgd operation` and other
REAPI tools call to list, inspect, wait for and cancel operations.

The operations are Execute's (`operations/{uuid}`), in flight or finished within the
last hour (`KEEP_DONE_S`); cache hits answered at once are never listed. ListOperations
reads its `name` as the REAPI instance name, as BuildGrid's clients send it (the
`operations` collection name is read as the default instance). `filter` takes one
term, `stage = S` or `stage != S` (S one of CACHE_CHECK, QUEUED, EXECUTING, COMPLETED,
any case), and an empty filter lists them all; pages are `page_size` long (default
100, at most 1000) and `next_page_token` is an offset. CancelOperation finishes an
operation that is not done with CANCELLED (a running action is killed on its worker);
WaitOperation returns the operation once it is done or after `timeout` (default 60 s,
at most 600 s); DeleteOperation forgets a finished one.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import grpc
from google.longrunning import operations_pb2
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.protobuf import empty_pb2

from rbs.server.execution import ExecutionEngine, operation_to_proto
from rbs.server.instances import Instances
from rbs.server.operations import Operation, Stage, UnknownOperation
from rbs.wire.errors import InvalidRequest, NotFound, rpc_errors

DEFAULT_PAGE = 100
MAX_PAGE = 1000
DEFAULT_WAIT_S = 60.0
MAX_WAIT_S = 600.0
_FILTER = re.compile(r"^\s*stage\s*(!=|=)\s*([A-Za-z_]+)\s*$")


def parse_filter(text: str) -> tuple[bool, Stage] | None:
    """`stage = S` -> (True, S), `stage != S` -> (False, S); "" -> None (everything)."""
    if not text.strip():
        return None
    m = _FILTER.match(text)
    stage = Stage.__members__.get(m[2].upper()) if m else None
    if m is None or stage is None or stage is Stage.UNKNOWN:
        raise InvalidRequest(
            f"unsupported filter {text!r}: use 'stage = S' or 'stage != S' with S one of "
            "CACHE_CHECK, QUEUED, EXECUTING, COMPLETED (or an empty filter for all)"
        )
    return m[1] == "=", stage


def _page(ops: list[Operation], size: int, token: str) -> tuple[list[Operation], str]:
    if size < 0:
        raise InvalidRequest(f"page_size {size} is negative")
    if size > MAX_PAGE:
        raise InvalidRequest(f"page_size {size} is over this server's maximum of {MAX_PAGE}")
    if token and not token.isdigit():
        raise InvalidRequest(f"page_token {token!r} is not one this server gave out")
    start, size = int(token or 0), size or DEFAULT_PAGE
    page = ops[start : start + size]
    return page, str(start + size) if start + size < len(ops) else ""


class OperationsServicer(lro_grpc.OperationsServicer):  # type: ignore[misc]
    """The gRPC edge; the operations themselves live in the engine's registry."""

    def __init__(self, engine: ExecutionEngine, instances: Instances) -> None:
        self._engine = engine
        self._instances = instances

    def _get(self, name: str) -> Operation:
        try:
            return self._engine.get(name)
        except UnknownOperation as e:
            raise NotFound(str(e)) from None

    @rpc_errors
    async def GetOperation(
        self,
        request: operations_pb2.GetOperationRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> operations_pb2.Operation:
        return operation_to_proto(self._get(request.name))

    @rpc_errors
    async def ListOperations(
        self,
        request: operations_pb2.ListOperationsRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> operations_pb2.ListOperationsResponse:
        instance = self._instances.check("" if request.name == "operations" else request.name)
        wanted = parse_filter(request.filter)
        ops = [
            op
            for op in self._engine.operations(instance)
            if wanted is None or (op.stage is wanted[1]) == wanted[0]
        ]
        page, token = _page(ops, request.page_size, request.page_token)
        return operations_pb2.ListOperationsResponse(
            operations=[operation_to_proto(op) for op in page], next_page_token=token
        )

    @rpc_errors
    async def CancelOperation(
        self,
        request: operations_pb2.CancelOperationRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> empty_pb2.Empty:
        self._get(request.name)
        self._engine.cancel(request.name)
        return empty_pb2.Empty()

    @rpc_errors
    async def DeleteOperation(
        self,
        request: operations_pb2.DeleteOperationRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> empty_pb2.Empty:
        self._get(request.name)
        self._engine.forget(request.name)
        return empty_pb2.Empty()

    @rpc_errors
    async def WaitOperation(
        self,
        request: operations_pb2.WaitOperationRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> operations_pb2.Operation:
        op = self._get(request.name)
        timeout = DEFAULT_WAIT_S
        if request.HasField("timeout"):
            timeout = request.timeout.seconds + request.timeout.nanos / 1e9
            if timeout < 0:
                raise InvalidRequest(f"timeout {timeout:g}s is negative")
            timeout = min(timeout, MAX_WAIT_S)

        async def until_done() -> Operation:
            last = op
            async for update in self._engine.watch(request.name):
                last = update
            return last

        if not op.done and timeout > 0:
            with contextlib.suppress(TimeoutError):
                op = await asyncio.wait_for(until_done(), timeout)
        return operation_to_proto(self._get(request.name) if not op.done else op)
