"""A result's own log lines (Workers protocol 4): stored as their batch before the result,
their Ack folded into the ResultAck, never an ack for lines not stored."""

from __future__ import annotations

import asyncio

import pytest

from rbs.model import LogLine, LogStream
from rbs.server import worker_acks
from rbs.server.worker_acks import FinalAcks
from rbs.wire.workers_jobs import JobFinishedReport, JobReport, LogAck, LogBatch, ResultAck
from rbs.wire.workers_session import ServerOrder


def _finished(lease: str, seqs: list[int]) -> JobFinishedReport:
    job = lease.split(".")[0]
    lines = tuple(LogLine(seq=s, time=1.0, stream=LogStream.OUT, text=f"l{s}") for s in seqs)
    return JobFinishedReport(
        lease_id=lease,
        job_id=job,
        task_index=-1,
        attempt=1,
        state="COMPLETED",
        exit_code=0,
        finished_at_ns=1,
        lines=lines,
    )


class Hub:
    """The hub's send through FinalAcks, and a job listener whose log intake acks a batch
    at once when `store` is true (as LogIntake does once the batch is stored)."""

    def __init__(self, store: bool = True) -> None:
        self.store = store
        self.sent: list[tuple[str, ServerOrder]] = []
        self.handled: list[JobReport] = []
        self.acks = FinalAcks(self.send)

    def send(self, worker_id: str, order: ServerOrder) -> bool:
        out = self.acks.outgoing(worker_id, order)
        if out is not None:
            self.sent.append((worker_id, out))
        return True

    async def job_message(self, worker_id: str, report: JobReport) -> None:
        self.handled.append(report)
        if isinstance(report, LogBatch) and self.store:
            seq = report.lines[-1].seq
            self.send(
                worker_id, LogAck(lease_id=report.lease_id, job_id=report.job_id, log_seq=seq)
            )


def _deliver(hub: Hub, worker: str, report: JobReport) -> None:
    asyncio.run(hub.acks.deliver(worker, report, hub.job_message))


def test_lines_are_handled_as_their_batch_before_the_result_without_them() -> None:
    hub = Hub()
    _deliver(hub, "w", _finished("5.1.0", [1, 2, 3]))
    batch, fin = hub.handled
    assert isinstance(batch, LogBatch) and [x.seq for x in batch.lines] == [1, 2, 3]
    assert (batch.lease_id, batch.job_id, batch.task_index) == ("5.1.0", "5", -1)
    assert isinstance(fin, JobFinishedReport) and fin.lines == ()
    # The lines' Ack waits for the result's.
    assert hub.sent == []
    hub.send("w", ResultAck(lease_id="5.1.0"))
    assert hub.sent == [("w", ResultAck(lease_id="5.1.0", log_seq=3))]
    assert hub.acks.held == 0


def test_lines_not_stored_are_not_acked_by_the_result() -> None:
    hub = Hub(store=False)
    _deliver(hub, "w", _finished("6.1.0", [1]))
    hub.send("w", ResultAck(lease_id="6.1.0"))
    assert hub.sent == [("w", ResultAck(lease_id="6.1.0"))]
    # Stored later (the intake retries): a plain Ack, as for any batch.
    late = LogAck(lease_id="6.1.0", log_seq=1)
    hub.send("w", late)
    assert hub.sent[-1] == ("w", late)


def test_other_traffic_passes_unchanged() -> None:
    hub = Hub()
    plain = _finished("7.1.0", [])
    _deliver(hub, "w", plain)
    assert hub.handled == [plain]
    ack = LogAck(lease_id="7.1.0", log_seq=4)
    hub.send("w", ack)
    hub.send("w", ResultAck(lease_id="7.1.0"))
    assert hub.sent == [("w", ack), ("w", ResultAck(lease_id="7.1.0"))]


def test_past_the_cap_the_oldest_held_ack_goes_out_on_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_acks, "MAX_HELD", 2)
    hub = Hub()
    for job in (1, 2, 3):
        _deliver(hub, f"w{job}", _finished(f"{job}.1.0", [1, 2]))
    assert hub.acks.held == 2
    assert hub.sent == [("w1", LogAck(lease_id="1.1.0", job_id="1", log_seq=2))]
    hub.send("w3", ResultAck(lease_id="3.1.0"))
    assert hub.sent[-1] == ("w3", ResultAck(lease_id="3.1.0", log_seq=2))
