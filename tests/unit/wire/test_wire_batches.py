"""Workers protocol 4's batches: what waits goes in one write, read back in order as if
the messages came one by one; limits on count and size; the end of a session."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.wire import workers_batch
from rbs.wire.workers_batch import orders_out, pack, unbatched, worker_batch
from rbs.wire.workers_jobs import JobStartedReport, LogAck, ResultAck
from rbs.wire.workers_session import ServerOrder, WorkerReport, order_from_pb
from rbs.wire.workers_stream import WorkerStream


def _hb(n: int) -> w_pb2.WorkerMessage:
    return w_pb2.WorkerMessage(heartbeat=w_pb2.Heartbeat(job_slots_used=n))


def test_a_lone_message_goes_as_itself_and_several_as_one_batch() -> None:
    assert list(pack([_hb(1)], worker_batch)) == [_hb(1)]
    (one,) = pack([_hb(1), _hb(2), _hb(3)], worker_batch)
    assert one.WhichOneof("kind") == "batch"
    assert [m.heartbeat.job_slots_used for m in one.batch.messages] == [1, 2, 3]


def test_batches_keep_to_their_count_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_batch, "MAX_BATCH", 2)
    groups = list(pack([_hb(i) for i in range(5)], worker_batch))
    assert [len(g.batch.messages) if g.HasField("batch") else 1 for g in groups] == [2, 2, 1]
    monkeypatch.setattr(workers_batch, "MAX_BATCH", 64)
    monkeypatch.setattr(workers_batch, "MAX_BATCH_BYTES", _hb(7).ByteSize() * 2)
    groups = list(pack([_hb(7)] * 5, worker_batch))
    assert [len(g.batch.messages) if g.HasField("batch") else 1 for g in groups] == [2, 2, 1]


def test_the_server_reads_a_batch_as_its_messages_in_order() -> None:
    async def source() -> AsyncIterator[w_pb2.WorkerMessage]:
        yield _hb(1)
        yield worker_batch([_hb(2), _hb(3)])
        yield _hb(4)

    async def main() -> list[int]:
        return [m.heartbeat.job_slots_used async for m in unbatched(source())]

    assert asyncio.run(main()) == [1, 2, 3, 4]


def test_the_server_sends_what_waits_in_one_batch_and_stops_at_the_end() -> None:
    async def main() -> list[w_pb2.ServerMessage]:
        outbox: asyncio.Queue[ServerOrder | None] = asyncio.Queue()
        for o in (ResultAck(lease_id="1.1.0"), LogAck(lease_id="2.1.0", log_seq=3)):
            outbox.put_nowait(o)
        outbox.put_nowait(None)
        outbox.put_nowait(ResultAck(lease_id="never"))
        return [m async for m in orders_out(outbox)]

    (msg,) = asyncio.run(main())
    orders = [order_from_pb(m) for m in msg.batch.messages]
    assert orders == [ResultAck(lease_id="1.1.0"), LogAck(lease_id="2.1.0", log_seq=3)]


class _Call:
    """A Connect call's two ends, as the worker's stream sees them."""

    def __init__(self, incoming: list[Any]) -> None:
        self.incoming = incoming
        self.written: list[w_pb2.WorkerMessage] = []
        self.fail = False

    async def read(self) -> Any:
        return self.incoming.pop(0) if self.incoming else None

    async def write(self, msg: w_pb2.WorkerMessage) -> None:
        if self.fail:
            raise ConnectionError("broken")
        self.written.append(msg)


def _stream(call: _Call) -> WorkerStream:
    stream = WorkerStream.__new__(WorkerStream)  # no channel: `call` stands for it
    stream._call = call  # type: ignore[assignment]
    stream._pending = collections.deque()
    return stream


def test_the_worker_reads_a_batch_as_its_orders_in_order() -> None:
    batch = w_pb2.ServerMessage(
        batch=w_pb2.ServerBatch(
            messages=[
                w_pb2.ServerMessage(result_ack=w_pb2.ResultAck(lease_id="a")),
                w_pb2.ServerMessage(result_ack=w_pb2.ResultAck(lease_id="b")),
            ]
        )
    )
    empty = w_pb2.ServerMessage(batch=w_pb2.ServerBatch())
    alone = w_pb2.ServerMessage(result_ack=w_pb2.ResultAck(lease_id="c"))
    stream = _stream(_Call([batch, empty, alone]))

    async def main() -> list[object]:
        return [await stream.read() for _ in range(4)]

    got = asyncio.run(main())
    assert got == [ResultAck(lease_id="a"), ResultAck(lease_id="b"), ResultAck(lease_id="c"), None]


def _started(lease: str) -> JobStartedReport:
    return JobStartedReport(
        lease_id=lease, job_id=lease.split(".")[0], task_index=-1, attempt=1, pid=5, started_at=1.0
    )


def test_the_worker_writes_what_waits_together_and_hands_back_what_a_failed_write_held() -> None:
    call = _Call([])
    stream = _stream(call)
    unsent: list[WorkerReport] = []

    async def main() -> None:
        outbox: asyncio.Queue[WorkerReport] = asyncio.Queue()
        for lease in ("1.1.0", "2.1.0", "3.1.0"):
            outbox.put_nowait(_started(lease))
        pump = asyncio.create_task(stream.pump(outbox, unsent.append))
        for _ in range(100):
            if call.written:
                break
            await asyncio.sleep(0.01)
        call.fail = True
        outbox.put_nowait(_started("4.1.0"))
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(pump, 10)

    asyncio.run(main())
    (one,) = call.written
    assert [m.job_started.lease_id for m in one.batch.messages] == ["1.1.0", "2.1.0", "3.1.0"]
    assert unsent == [_started("4.1.0")]
