"""The worker's end of a Workers Connect stream: typed reports out, typed orders in."""

from __future__ import annotations

import grpc

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.wire.auth import auth_metadata
from rbs.wire.workers_session import (
    ServerOrder,
    UnknownOrder,
    WorkerReport,
    order_from_pb,
    report_to_pb,
)


class WorkerStream:
    """One Connect call on `channel`, authenticated with `token` when there is one.

    `read()` returns None once the server has closed the stream. gRPC's own errors
    (`grpc.aio.AioRpcError`, ...) pass through, for the worker to tell a refusal from a
    broken connection.
    """

    def __init__(self, channel: grpc.aio.Channel, token: str | None) -> None:
        self._call: grpc.aio.StreamStreamCall[w_pb2.WorkerMessage, w_pb2.ServerMessage] = (
            w_grpc.WorkersStub(channel).Connect(metadata=auth_metadata(token))
        )

    async def write(self, report: WorkerReport) -> None:
        await self._call.write(report_to_pb(report))

    async def read(self) -> ServerOrder | UnknownOrder | None:
        msg = await self._call.read()
        # The stream's end reads as grpc.aio.EOF, which is no ServerMessage.
        if not isinstance(msg, w_pb2.ServerMessage):
            return None
        return order_from_pb(msg)

    async def done_writing(self) -> None:
        await self._call.done_writing()

    def cancel(self) -> None:
        self._call.cancel()
