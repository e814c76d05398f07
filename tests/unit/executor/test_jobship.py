"""LogShipper: batching, acknowledgements, and resending from the spool after a reconnect."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.executor import jobship
from rbs.executor.joblog import LogSpool
from rbs.executor.jobship import LogShipper
from rbs.model import LogStream
from rbs.wire.workers_jobs import JobLeaseInfo, JobReport
from rbs.wire.workers_session import report_to_pb

LEASE = JobLeaseInfo(lease_id="7_2.1.0", job_id="7", manifest=None, task_index=2, attempt=1)


class Wire:
    """The messages the shipper's reports become on the stream."""

    def __init__(self) -> None:
        self.up = True
        self.sent: list[w_pb2.WorkerMessage] = []

    def send(self, report: JobReport) -> None:
        self.sent.append(report_to_pb(report))

    def seqs(self) -> list[int]:
        return [ln.seq for m in self.sent for ln in m.log_lines.lines]


def _shipper(tmp_path: Path, wire: Wire) -> tuple[LogShipper, LogSpool]:
    spool = LogSpool(tmp_path / "log.jsonl")
    return LogShipper(LEASE, spool, send=wire.send, connected=lambda: wire.up), spool


def _emit(ship: LogShipper, spool: LogSpool, n: int, stream: LogStream = LogStream.OUT) -> None:
    ship.on_lines(spool.append([(stream, f"line {i}", True) for i in range(n)]))


def test_lines_go_out_in_one_batch_after_the_delay(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        ship, spool = _shipper(tmp_path, wire)
        _emit(ship, spool, 2)
        _emit(ship, spool, 1, LogStream.ERR)
        assert wire.sent == []  # batched, not one message per line
        await asyncio.sleep(jobship.BATCH_DELAY_S * 3)
        assert len(wire.sent) == 1
        msg = wire.sent[0].log_lines
        assert (msg.job_id, msg.task_index, msg.attempt, msg.lease_id) == ("7", 2, 1, "7_2.1.0")
        assert [(x.seq, x.stream, x.text) for x in msg.lines] == [
            (1, w_pb2.LogLine.OUT, "line 0"),
            (2, w_pb2.LogLine.OUT, "line 1"),
            (3, w_pb2.LogLine.ERR, "line 0"),
        ]
        assert msg.lines[0].time.seconds > 0

    asyncio.run(main())


def test_a_full_batch_goes_out_at_once_and_is_split(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        ship, spool = _shipper(tmp_path, wire)
        _emit(ship, spool, jobship.BATCH_LINES * 2 + 3)
        # A full batch flushes everything pending, the tail included.
        assert [len(m.log_lines.lines) for m in wire.sent] == [jobship.BATCH_LINES] * 2 + [3]
        assert wire.seqs() == list(range(1, jobship.BATCH_LINES * 2 + 4))
        ship.close()

    asyncio.run(main())


def test_reconnect_resends_exactly_what_is_unacknowledged(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        ship, spool = _shipper(tmp_path, wire)
        _emit(ship, spool, 10)
        ship.flush()
        ship.ack(4)
        wire.up = False  # the stream breaks; lines 5-10 may or may not have arrived
        _emit(ship, spool, 5)
        ship.flush()
        assert wire.seqs() == list(range(1, 11))
        wire.sent.clear()
        wire.up = True
        ship.rewind()
        ship.flush()
        assert wire.seqs() == list(range(5, 16))
        ship.ack(15)
        assert ship.all_acked

    asyncio.run(main())


def test_lines_dropped_from_memory_are_read_back_from_the_spool(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        wire.up = False
        ship, spool = _shipper(tmp_path, wire)
        for _ in range(5):
            _emit(ship, spool, jobship.MAX_BUFFERED // 4)
            ship.flush()  # over the cap: the buffer is dropped, the spool keeps them
        total = 5 * (jobship.MAX_BUFFERED // 4)
        wire.up = True
        ship.rewind()
        ship.flush()
        assert wire.seqs() == list(range(1, total + 1))
        assert all(len(m.log_lines.lines) <= jobship.BATCH_LINES for m in wire.sent)

    asyncio.run(main())


def test_out_of_order_batches_still_ship_every_line_once(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        ship, spool = _shipper(tmp_path, wire)
        early = spool.append([(LogStream.OUT, "a", True), (LogStream.OUT, "b", True)])
        late = spool.append([(LogStream.SYS, "c", True)])
        ship.on_lines(late)
        ship.on_lines(early)
        ship.flush()
        assert wire.seqs() == [1, 2, 3]

    asyncio.run(main())


def test_an_unreadable_spool_gives_up_its_lines_not_the_stream(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        wire.up = False
        ship, spool = _shipper(tmp_path, wire)
        _emit(ship, spool, jobship.MAX_BUFFERED + 1)
        ship.flush()
        spool.path.unlink()
        wire.up = True
        ship.rewind()
        ship.flush()  # logs an error; must not raise
        assert wire.sent == []
        assert ship.all_acked

    asyncio.run(main())
