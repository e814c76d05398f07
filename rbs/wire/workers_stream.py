"""The worker's end of a Workers Connect stream: typed reports out, typed orders in."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence

import grpc

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.wire.auth import auth_metadata
from rbs.wire.workers_batch import MAX_BATCH, pack, worker_batch
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
    broken connection. The server's batches (protocol 4, `rbs.wire.workers_batch`) read
    as their orders one by one.
    """

    def __init__(self, channel: grpc.aio.Channel, token: str | None) -> None:
        self._call: grpc.aio.StreamStreamCall[w_pb2.WorkerMessage, w_pb2.ServerMessage] = (
            w_grpc.WorkersStub(channel).Connect(metadata=auth_metadata(token))
        )
        self._pending: collections.deque[w_pb2.ServerMessage] = collections.deque()

    async def write(self, report: WorkerReport) -> None:
        await self._call.write(report_to_pb(report))

    async def write_many(self, reports: Sequence[WorkerReport]) -> None:
        """`reports` in order, in as few writes as a batch's limits allow."""
        for msg in pack([report_to_pb(r) for r in reports], worker_batch):
            await self._call.write(msg)

    async def pump(
        self,
        outbox: asyncio.Queue[WorkerReport],
        unsent: Callable[[WorkerReport], None],
    ) -> None:
        """Write the reports `outbox` gets, forever: what waits there goes out together.
        When a write fails (or is cancelled), `unsent` gets every report it held."""
        while True:
            reports = [await outbox.get()]
            while len(reports) < MAX_BATCH and not outbox.empty():
                reports.append(outbox.get_nowait())
            try:
                await self.write_many(reports)
            except BaseException:
                for r in reports:
                    unsent(r)
                raise

    async def read(self) -> ServerOrder | UnknownOrder | None:
        while not self._pending:
            msg = await self._call.read()
            # The stream's end reads as grpc.aio.EOF, which is no ServerMessage.
            if not isinstance(msg, w_pb2.ServerMessage):
                return None
            if msg.WhichOneof("kind") == "batch":
                self._pending.extend(msg.batch.messages)
            else:
                self._pending.append(msg)
        return order_from_pb(self._pending.popleft())

    async def done_writing(self) -> None:
        await self._call.done_writing()

    def cancel(self) -> None:
        self._call.cancel()
