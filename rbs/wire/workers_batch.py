"""Several Workers stream messages in one write (protocol 4: WorkerBatch, ServerBatch).

Each side writes what its outbox holds when the stream can take more as one message,
not one write per message: a burst of short jobs' results, log batches and acks costs
one gRPC write (and one read on the other side) instead of one each. Nothing waits to
be batched: a lone message goes out alone, as itself. A batch holds at most
`MAX_BATCH` messages and about `MAX_BATCH_BYTES`, well under gRPC's 4 MiB message
limit (a larger message goes alone). The reader unpacks a batch in order, so the
messages mean exactly what they would one by one; a batch inside a batch is not
unpacked and reads as a message of an unknown kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TypeVar

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.wire.workers_session import ServerOrder, order_to_pb

MAX_BATCH = 64
MAX_BATCH_BYTES = 1 << 20

M = TypeVar("M", w_pb2.WorkerMessage, w_pb2.ServerMessage)


def pack(messages: Sequence[M], wrap: Callable[[list[M]], M]) -> Iterator[M]:
    """`messages` in as few writes as the limits allow: a group of one as itself."""
    group: list[M] = []
    size = 0
    for m in messages:
        n = m.ByteSize()
        if group and (len(group) >= MAX_BATCH or size + n > MAX_BATCH_BYTES):
            yield group[0] if len(group) == 1 else wrap(group)
            group, size = [], 0
        group.append(m)
        size += n
    if group:
        yield group[0] if len(group) == 1 else wrap(group)


def worker_batch(messages: list[w_pb2.WorkerMessage]) -> w_pb2.WorkerMessage:
    return w_pb2.WorkerMessage(batch=w_pb2.WorkerBatch(messages=messages))


def server_batch(messages: list[w_pb2.ServerMessage]) -> w_pb2.ServerMessage:
    return w_pb2.ServerMessage(batch=w_pb2.ServerBatch(messages=messages))


async def unbatched(
    messages: AsyncIterator[w_pb2.WorkerMessage],
) -> AsyncIterator[w_pb2.WorkerMessage]:
    """A worker's messages one by one, its batches unpacked in order (the server's read)."""
    async for msg in messages:
        if msg.WhichOneof("kind") == "batch":
            for inner in msg.batch.messages:
                yield inner
        else:
            yield msg


async def orders_out(
    outbox: asyncio.Queue[ServerOrder | None],
) -> AsyncIterator[w_pb2.ServerMessage]:
    """The messages for a session's orders as they come, until a None: what waits in
    `outbox` goes out in one batch (the server's write)."""
    while True:
        order = await outbox.get()
        if order is None:
            return
        pbs = [order_to_pb(order)]
        ended = False
        while len(pbs) < MAX_BATCH * 4 and not outbox.empty():
            nxt = outbox.get_nowait()
            if nxt is None:
                ended = True
                break
            pbs.append(order_to_pb(nxt))
        for msg in pack(pbs, server_batch):
            yield msg
        if ended:
            return
