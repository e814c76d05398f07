"""Ship one run's numbered log lines to the server: batched, acknowledged, resent.

The job runner spools every line before the shipper sees it, so the shipper keeps
only cursors: the highest seq known (`last`), sent on the current stream (`sent`), and
acknowledged by the server (`acked`). Lines normally travel from an in-memory buffer
filled by the runner's sink; after a reconnect (or when the buffer was dropped while
disconnected) they are read back from the spool from `acked + 1`. The server dedupes
by (job, task, attempt, rank, seq), so a line sent twice is stored once, and nothing
below `acked` is ever needed again.

A --pty run's raw terminal output (`output_report`) is shipped beside the log, not
numbered nor resent: a live view for attached clients, which its log has as lines.

Everything here runs on the worker's event loop thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rbs.executor.joblog import LogSpool, LogSpoolError
from rbs.executor.supervisor_proto import Message, Output
from rbs.model import LogLine
from rbs.wire.workers_jobs import (
    JobFinishedReport,
    JobLeaseInfo,
    JobReport,
    JobStartedReport,
    LogBatch,
    OutputReport,
)

log = logging.getLogger(__name__)

# A batch goes out when it holds this many lines, or this long after its first line.
BATCH_LINES = 500
BATCH_DELAY_S = 0.05
# While disconnected, lines beyond this many are left to the spool, not kept in memory.
MAX_BUFFERED = 20_000
# A run still going this long after its process started is reported as started.
START_REPORT_DELAY_S = 0.05
# A --pty run's raw output past this many bytes in a second is dropped, not queued
# without bound for a slow stream (its log keeps every line).
MAX_RAW_BPS = 4 << 20


class LogShipper:
    """The cursors and buffer of one run's log; see the module docstring."""

    def __init__(
        self,
        lease: JobLeaseInfo,
        spool: LogSpool | None,
        *,
        send: Callable[[JobReport], None],
        connected: Callable[[], bool],
    ) -> None:
        self._lease = lease
        self.spool = spool
        self._send = send
        self._connected = connected
        # The spool may be opened later (on another thread); lines arrive only after.
        self.last = spool.next_seq - 1 if spool is not None else 0
        self.sent = 0
        self.acked = 0
        self._buffer: list[LogLine] = []
        self._timer: asyncio.TimerHandle | None = None

    @property
    def all_acked(self) -> bool:
        return self.acked >= self.last

    def on_lines(self, lines: Sequence[LogLine]) -> None:
        """New spooled lines (in seq order); sends a full batch now, else soon."""
        if not lines:
            return
        self.last = max(self.last, lines[-1].seq)
        if self._buffer and lines[0].seq != self._buffer[-1].seq + 1:
            self._buffer = []  # not contiguous: flush() reads the gap from the spool
        self._buffer.extend(lines)
        if len(self._buffer) >= BATCH_LINES:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(BATCH_DELAY_S, self.flush)

    def ack(self, seq: int) -> None:
        self.acked = max(self.acked, min(seq, self.last))

    def rewind(self) -> None:
        """A new stream: everything not acknowledged goes out again."""
        self.sent = self.acked

    def flush(self) -> None:
        """Send every line past `sent` (all of them, in order) if a stream is open."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._connected():
            if len(self._buffer) > MAX_BUFFERED:
                self._buffer.clear()  # the spool has them; rewind() reads them back
            return
        while self.sent < self.last:
            buf = self._buffer
            if buf and buf[0].seq <= self.sent + 1 <= buf[-1].seq:
                start = self.sent + 1 - buf[0].seq
                batch = buf[start : start + BATCH_LINES]
            else:
                try:
                    if self.spool is None:
                        raise LogSpoolError("the run has no log spool")
                    batch = self.spool.read_from(self.sent + 1, limit=BATCH_LINES)
                except (OSError, LogSpoolError, ValueError) as e:
                    batch, problem = [], f"cannot read the log spool: {e}"
                else:
                    problem = f"the spool ends before line {self.sent + 1}"
                if not batch:
                    # Nothing to resend from: give those lines up rather than the stream.
                    log.error(
                        "lease %s: lines %d-%d are lost: %s",
                        self._lease.lease_id,
                        self.sent + 1,
                        self.last,
                        problem,
                    )
                    self.sent = self.acked = self.last
                    break
            self._send(
                LogBatch(
                    lease_id=self._lease.lease_id,
                    job_id=self._lease.job_id,
                    task_index=self._lease.task_index,
                    attempt=self._lease.attempt,
                    lines=tuple(batch),
                )
            )
            self.sent = batch[-1].seq
        if self._buffer and self._buffer[-1].seq <= self.sent:
            self._buffer = []
        elif self._buffer and self._buffer[0].seq <= self.sent:
            self._buffer = self._buffer[self.sent + 1 - self._buffer[0].seq :]

    def finish(self, report: JobFinishedReport) -> JobFinishedReport:
        """The run's JobFinished to send now: with its last unsent lines in it (Workers
        protocol 4: one message, and the server's ResultAck acks both) when they are all
        still in memory and fit one batch; else they go out first as LogLines."""
        buf, first = self._buffer, self.sent + 1
        if (
            self._connected()
            and 0 < self.last - self.sent <= BATCH_LINES
            and buf
            and buf[0].seq <= first
            and buf[-1].seq == self.last
        ):
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            lines = tuple(buf[first - buf[0].seq :])
            self.sent, self._buffer = self.last, []
            return dataclasses.replace(report, lines=lines)
        self.flush()
        return report

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buffer = []


def thread_sink(
    deliver: Callable[[Sequence[LogLine]], None],
) -> Callable[[Sequence[LogLine]], None]:
    """A sink for a worker thread that hands lines to `deliver` on the running loop,
    many per wake-up of the loop."""
    loop = asyncio.get_running_loop()
    lock = threading.Lock()
    pending: list[LogLine] = []

    def drain() -> None:
        with lock:
            lines = pending[:]
            pending.clear()
        deliver(lines)

    def sink(lines: Sequence[LogLine]) -> None:
        with lock:
            wake = not pending
            pending.extend(lines)
        if wake:
            loop.call_soon_threadsafe(drain)

    return sink


class StartReports:
    """JobStarted for runs still alive `START_REPORT_DELAY_S` after their start: a job
    over sooner needs none (its JobFinished says everything), which spares the stream a
    message per short job. One timer for every pending report, not one per run."""

    def __init__(self, send: Callable[[JobReport], None]) -> None:
        self._send = send
        self._queue: collections.deque[tuple[float, float, Any]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def add(self, run: Any, started_at: float) -> None:
        """`run` is a jobrun.LeaseRun (its lease, pid, and whether it still runs)."""
        self._queue.append((time.monotonic(), started_at, run))
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(START_REPORT_DELAY_S, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = time.monotonic()
        while self._queue and now - self._queue[0][0] >= START_REPORT_DELAY_S:
            _, started_at, run = self._queue.popleft()
            if run.pid is None or not run.live or run.start_reported:
                continue  # over already
            run.start_reported = True
            lease = run.lease
            self._send(
                JobStartedReport(
                    lease_id=lease.lease_id,
                    job_id=lease.job_id,
                    task_index=lease.task_index,
                    attempt=lease.attempt,
                    pid=run.pid,
                    started_at=started_at,
                )
            )
        if self._queue:
            wait = START_REPORT_DELAY_S - (now - self._queue[0][0])
            self._timer = asyncio.get_running_loop().call_later(wait, self._fire)


class RawBudget:
    """How much of one --pty run's raw output may still go out in the current second."""

    __slots__ = ("sent", "start")

    def __init__(self) -> None:
        self.start = 0.0
        self.sent = 0

    def take(self, n: int, now: float) -> bool:
        if now - self.start >= 1.0:
            self.start, self.sent = now, 0
        if self.sent + n > MAX_RAW_BPS:
            return False
        self.sent += n
        return True


def output_report(msg: Message, budget: RawBudget, connected: bool) -> OutputReport | None:
    """The server's JobOutput for a supervisor `Output` event (None for any other event,
    or when it is dropped: no stream, or over the run's `budget`)."""
    if not isinstance(msg, Output) or not connected:
        return None
    try:
        data = base64.b64decode(msg.data, validate=True)
    except (binascii.Error, ValueError):
        return None
    if not budget.take(len(data), time.monotonic()):
        return None
    return OutputReport(lease_id=msg.lease_id, data=data)
