"""The job host without a server: the messages it sends, across a broken stream, in its slots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.cas.memory import MemoryStore
from rbs.executor.cgroup_base import NullBackend
from rbs.executor.jobhost import JobHost
from rbs.model import JobManifest
from rbs.wire.workers import manifest_to_proto
from rbs.wire.workers_jobs import (
    JobFinishedReport,
    JobLeaseInfo,
    JobOrder,
    JobReport,
    KillOrder,
    LogAck,
    ResultAck,
)
from rbs.wire.workers_session import order_from_pb, report_to_pb


class Wire:
    """What the host sent (as the messages the stream carries), and whether a stream is open."""

    def __init__(self) -> None:
        self.up = True
        self.sent: list[w_pb2.WorkerMessage] = []
        self.reports: list[JobReport] = []

    def send(self, report: JobReport) -> None:
        self.reports.append(report)
        self.sent.append(report_to_pb(report))

    def clear(self) -> None:
        self.sent.clear()
        self.reports.clear()

    def last_finished(self) -> JobFinishedReport:
        """The last JobFinished report, to hand back as if no stream had taken it."""
        return [r for r in self.reports if isinstance(r, JobFinishedReport)][-1]

    def kinds(self) -> list[str]:
        return [str(m.WhichOneof("kind")) for m in self.sent]

    def lines(self, lease: str | None = None) -> list[w_pb2.LogLine]:
        """Every line sent (of `lease` only, when given): in LogLines, and the last ones
        in a JobFinished (protocol 4), in the order they went out."""
        out: list[w_pb2.LogLine] = []
        for m in self.sent:
            kind = m.WhichOneof("kind")
            if kind in ("log_lines", "job_finished"):
                batch = getattr(m, str(kind))
                if lease is None or batch.lease_id == lease:
                    out.extend(batch.lines)
        return out

    def seqs(self, lease: str) -> list[int]:
        return [x.seq for x in self.lines(lease)]

    def finished(self, lease: str) -> w_pb2.JobFinished | None:
        for m in self.sent:
            if m.WhichOneof("kind") == "job_finished" and m.job_finished.lease_id == lease:
                return m.job_finished
        return None


# Stopped after each test: a host's runs live in its run supervisor, a process.
_HOSTS: list[JobHost] = []


def _host(tmp_path: Path, wire: Wire, slots: int = 2) -> JobHost:
    host = JobHost(
        work_dir=tmp_path / "worker",
        store=MemoryStore(),
        send=wire.send,
        connected=lambda: wire.up,
        slots=slots,
        hostname="test-host",
        backend=NullBackend("not needed here"),
        grace_s=1.0,
    )
    _HOSTS.append(host)
    return host


def _order(msg: w_pb2.ServerMessage) -> JobOrder:
    """A message from the server as the worker's stream reads it."""
    order = order_from_pb(msg)
    assert isinstance(order, JobLeaseInfo | KillOrder | LogAck | ResultAck)
    return order


def _result_ack(lease_id: str) -> w_pb2.ServerMessage:
    return w_pb2.ServerMessage(result_ack=w_pb2.ResultAck(lease_id=lease_id))


def _lease(job: int, script: str, **manifest: Any) -> w_pb2.ServerMessage:
    m = JobManifest(name=f"j{job}", command=("sh", "-c", script), **manifest)
    return w_pb2.ServerMessage(
        job_lease=w_pb2.JobLease(
            lease_id=f"{job}.1.0",
            job_id=str(job),
            manifest=manifest_to_proto(m),
            task_index=-1,
            attempt=1,
            env={"RBS_JOB_ID": str(job), "RBS_ATTEMPT": "1", "CUDA_VISIBLE_DEVICES": ""},
        )
    )


async def _until(what: str, check: Callable[[], object], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        try:
            await coro()
        finally:
            while _HOSTS:
                await _HOSTS.pop().stop()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_lines_then_finished_in_order_and_cleanup_after_ack(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        await host.handle(_order(_lease(1, "echo one; echo two >&2; exit 4")))
        await _until("JobFinished", lambda: wire.finished("1.1.0"))
        fin = wire.finished("1.1.0")
        assert fin is not None
        assert (fin.state, fin.exit_code, fin.signal) == ("FAILED", 4, 0)
        kinds = wire.kinds()
        assert kinds[-1] == "job_finished"  # no line after the end
        # Over at once: no start report needed (the JobFinished says everything).
        assert "job_started" not in kinds
        seqs = wire.seqs("1.1.0")
        assert seqs == list(range(1, len(seqs) + 1))
        # Held until the server says it journaled the result.
        assert host.held_leases() == ["1.1.0"]
        assert host.slots_used() == 0
        # The stream broke before the writer got to the JobFinished: held, and re-sent.
        host.unsent(wire.last_finished())
        assert host.held_leases() == ["1.1.0"]
        wire.clear()
        host.on_connected()
        assert wire.kinds() == ["log_lines", "job_finished"]
        # Re-sent, the result carries no lines: they went before it, from the spool.
        assert not wire.sent[-1].job_finished.lines and wire.seqs("1.1.0") == seqs
        assert host.held_leases() == ["1.1.0"]
        await host.handle(
            _order(w_pb2.ServerMessage(ack=w_pb2.Ack(lease_id="1.1.0", log_seq=seqs[-1])))
        )
        folder = tmp_path / "worker/jobs/1.1.0"
        assert (folder / "log.jsonl").exists()  # until the result is acknowledged too
        await host.handle(_order(_result_ack("1.1.0")))
        await _until("the run's folder to be removed", lambda: not folder.exists())
        assert host.held_leases() == []

    _run(main)


def test_a_short_runs_last_lines_ride_with_its_result_and_one_ack_covers_both(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        await host.handle(_order(_lease(7, "echo one; echo two")))
        await _until("JobFinished", lambda: wire.finished("7.1.0"))
        # One message for the whole run: its lines are in its JobFinished.
        assert wire.kinds() == ["job_finished"]
        fin = wire.finished("7.1.0")
        assert fin is not None and fin.state == "COMPLETED"
        texts = [x.text for x in fin.lines if x.stream == 1]
        assert texts == ["one", "two"]
        seqs = [x.seq for x in fin.lines]
        assert seqs == list(range(1, len(seqs) + 1))
        folder = tmp_path / "worker/jobs/7.1.0"
        # A ResultAck that says nothing of the lines: the run is kept for their Ack.
        await host.handle(_order(_result_ack("7.1.0")))
        assert host.held_leases() == [] and folder.exists()
        # A new stream before that Ack: the lines go again, from the spool.
        wire.clear()
        host.on_connected()
        assert [x.seq for x in wire.lines("7.1.0")] == seqs
        both = w_pb2.ResultAck(lease_id="7.1.0", log_seq=seqs[-1])
        await host.handle(_order(w_pb2.ServerMessage(result_ack=both)))
        await _until("the run's folder to be removed", lambda: not folder.exists())

    _run(main)


def test_one_result_ack_with_the_log_seq_lets_the_run_go(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        await host.handle(_order(_lease(8, "echo only")))
        await _until("JobFinished", lambda: wire.finished("8.1.0"))
        fin = wire.finished("8.1.0")
        assert fin is not None and fin.lines
        both = w_pb2.ResultAck(lease_id="8.1.0", log_seq=fin.lines[-1].seq)
        await host.handle(_order(w_pb2.ServerMessage(result_ack=both)))
        folder = tmp_path / "worker/jobs/8.1.0"
        await _until("the run's folder to be removed", lambda: not folder.exists())
        assert host.held_leases() == []

    _run(main)


def test_a_run_ending_while_disconnected_is_held_and_reported_after(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        gate = tmp_path / "gate"
        await host.handle(
            _order(
                _lease(2, f"echo before; while [ ! -e {gate} ]; do sleep 0.01; done; echo after")
            )
        )
        await _until("the first line", lambda: wire.seqs("2.1.0"))
        acked = wire.seqs("2.1.0")[-1]
        await host.handle(
            _order(w_pb2.ServerMessage(ack=w_pb2.Ack(lease_id="2.1.0", log_seq=acked)))
        )
        wire.up = False
        gate.touch()
        await _until("the run to end", lambda: host.slots_used() == 0)
        await asyncio.sleep(0.1)  # past any batch delay: still nothing may be sent
        assert wire.finished("2.1.0") is None
        assert host.held_leases() == ["2.1.0"]
        wire.clear()
        wire.up = True
        host.on_connected()
        seqs = wire.seqs("2.1.0")
        assert seqs[0] == acked + 1
        assert seqs == list(range(acked + 1, acked + 1 + len(seqs)))
        assert wire.kinds()[-1] == "job_finished"
        texts = [x.text for x in wire.lines()]
        assert "after" in texts and "before" not in texts
        assert host.held_leases() == ["2.1.0"]  # written, but not known journaled
        # The writer could not send it after all: it is held and re-sent.
        host.unsent(wire.last_finished())
        assert host.held_leases() == ["2.1.0"]
        wire.clear()
        host.on_connected()
        assert wire.kinds()[-1] == "job_finished"
        await host.handle(_order(_result_ack("2.1.0")))
        assert host.held_leases() == []

    _run(main)


def test_kill_ends_the_run_with_the_schedulers_reason(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        await host.handle(_order(_lease(3, 'trap "echo term; exit 1" TERM; sleep 30 & wait')))
        await _until("the start report", lambda: "job_started" in wire.kinds())
        started = next(m.job_started for m in wire.sent if m.WhichOneof("kind") == "job_started")
        assert started.pid > 0 and started.lease_id == "3.1.0"
        kill = w_pb2.KillJob(lease_id="3.1.0", job_id="3", reason="timeout")
        await host.handle(_order(w_pb2.ServerMessage(kill_job=kill)))
        await _until("JobFinished", lambda: wire.finished("3.1.0"))
        fin = wire.finished("3.1.0")
        assert fin is not None and fin.state == "TIMEOUT"
        texts = [x.text for x in wire.lines()]
        assert "term" in texts
        assert any("time limit reached (scheduler)" in t for t in texts)

    _run(main)


def test_never_more_runs_than_slots(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire, slots=1)
        gate = tmp_path / "gate"
        await host.handle(_order(_lease(4, f"while [ ! -e {gate} ]; do sleep 0.01; done")))
        await host.handle(_order(_lease(5, "echo second")))
        await host.handle(_order(_lease(6, "echo third")))
        await _until("the first to start", lambda: "job_started" in wire.kinds())
        await asyncio.sleep(0.2)
        assert wire.kinds().count("job_started") == 1  # the others wait for the slot
        assert host.slots_used() == 1
        assert host.held_leases() == ["4.1.0", "5.1.0", "6.1.0"]
        # A waiting run that is killed never starts.
        await host.handle(_order(w_pb2.ServerMessage(kill_job=w_pb2.KillJob(lease_id="6.1.0"))))
        await _until("the killed run to report", lambda: wire.finished("6.1.0"))
        fin6 = wire.finished("6.1.0")
        assert fin6 is not None and fin6.state == "CANCELLED"
        gate.touch()
        await _until("the second run", lambda: wire.finished("5.1.0"))
        fin5 = wire.finished("5.1.0")
        assert fin5 is not None and fin5.state == "COMPLETED"
        assert [x.text for x in wire.lines() if x.stream == 1] == ["second"]

    _run(main)


def test_a_repeated_lease_runs_once(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        marker = tmp_path / "runs"
        lease = _lease(7, f"echo x >> {marker}")
        await host.handle(_order(lease))
        await host.handle(_order(lease))
        await _until("JobFinished", lambda: wire.finished("7.1.0"))
        await asyncio.sleep(0.1)
        assert marker.read_text() == "x\n"
        assert wire.kinds().count("job_finished") == 1

    _run(main)


def test_a_bad_manifest_fails_with_a_reason(tmp_path: Path) -> None:
    async def main() -> None:
        wire = Wire()
        host = _host(tmp_path, wire)
        msg = _lease(8, "true")
        msg.job_lease.manifest.ClearField("command")
        await host.handle(_order(msg))
        await _until("JobFinished", lambda: wire.finished("8.1.0"))
        fin = wire.finished("8.1.0")
        assert fin is not None and fin.state == "FAILED" and fin.exit_code == 125
        assert "cannot read the job lease" in fin.message

    _run(main)
