"""Workers protocol 4 on the wire: a JobFinished carries its run's last lines (read in
its run, as a LogLines' are), and a ResultAck its lines' seq."""

from __future__ import annotations

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.model import LogLine, LogStream
from rbs.wire.workers import WORKERS_PROTOCOL
from rbs.wire.workers_jobs import JobFinishedReport, ResultAck, final_batch
from rbs.wire.workers_session import order_from_pb, order_to_pb, report_from_pb, report_to_pb


def _report(lines: tuple[LogLine, ...]) -> JobFinishedReport:
    return JobFinishedReport(
        lease_id="9_3.2.1",
        job_id="9",
        task_index=3,
        attempt=2,
        state="COMPLETED",
        exit_code=0,
        finished_at_ns=1_700_000_000_000_000_000,
        lines=lines,
    )


def test_the_protocol_is_4() -> None:
    assert WORKERS_PROTOCOL == 4


def test_job_finished_carries_its_lines_in_its_run() -> None:
    sent = (
        LogLine(seq=1, time=1.5, stream=LogStream.OUT, text="out"),
        LogLine(seq=2, time=2.25, stream=LogStream.SYS, text="exit 0"),
    )
    msg = report_to_pb(_report(sent))
    assert [x.text for x in msg.job_finished.lines] == ["out", "exit 0"]
    got = report_from_pb(
        w_pb2.WorkerMessage.FromString(msg.SerializeToString()), rank_of=lambda _: 1
    )
    assert isinstance(got, JobFinishedReport)
    assert [(x.seq, x.stream, x.text, x.time) for x in got.lines] == [
        (1, LogStream.OUT, "out", 1.5),
        (2, LogStream.SYS, "exit 0", 2.25),
    ]
    assert {(x.task, x.attempt, x.rank) for x in got.lines} == {(3, 2, 1)}
    batch = final_batch(got)
    assert (batch.lease_id, batch.job_id, batch.task_index, batch.attempt) == ("9_3.2.1", "9", 3, 2)
    assert batch.lines == got.lines


def test_a_job_finished_without_lines_reads_as_none() -> None:
    msg = report_to_pb(_report(()))
    assert len(msg.job_finished.lines) == 0
    got = report_from_pb(msg, rank_of=lambda _: 0)
    assert isinstance(got, JobFinishedReport) and got.lines == ()


def test_result_ack_carries_the_log_seq() -> None:
    msg = order_to_pb(ResultAck(lease_id="9_3.2.1", log_seq=42))
    assert msg.result_ack.log_seq == 42
    assert order_from_pb(msg) == ResultAck(lease_id="9_3.2.1", log_seq=42)
    assert order_from_pb(order_to_pb(ResultAck(lease_id="x"))) == ResultAck(lease_id="x")
