"""Workers' log batches into the log store, each acknowledged once it is stored.

`LogIntake` acknowledges a batch only once `JobLogs.append` has committed it: when the
store cannot write (disk full), batches wait in memory, in order, unacknowledged (so the
worker keeps them in its spool too), and go in once it can.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable

from rbs.server.job_logs import JobLogs
from rbs.wire.workers_jobs import JobOrder, LogAck, LogBatch

log = logging.getLogger(__name__)

# Log lines kept in memory while the store cannot write; past this, the worker's spool
# keeps them (they come again when it reconnects).
MAX_HELD_LOG_LINES = 200_000


class LogIntake:
    """Workers' log batches into `JobLogs`, in arrival order, each acked once stored."""

    def __init__(self, logs: JobLogs, send: Callable[[str, JobOrder], object]) -> None:
        self._logs = logs
        self._send = send
        self._held: list[tuple[str, LogBatch]] = []
        self._held_lines = 0
        # lease -> the first line let go from memory: never acked from there on, so
        # the worker re-sends it (and what follows) on its next stream.
        self._gaps: dict[str, int] = {}
        self._waiting = False  # the store refused a batch (said once per episode)

    @property
    def held(self) -> int:
        """How many batches wait to be stored."""
        return len(self._held)

    def add(self, worker_id: str, batch: LogBatch) -> None:
        self._held.append((worker_id, batch))
        self._held_lines += len(batch.lines)
        self.retry()

    def retry(self) -> None:
        """Store what waits, oldest first; stop at the first batch the store refuses."""
        while self._held:
            worker_id, batch = self._held[0]
            lines = batch.lines
            try:
                self._logs.append(int(batch.job_id), lines)
            except sqlite3.Error as e:
                if not self._waiting:
                    log.warning("job %s: log lines wait to be stored: %s", batch.job_id, e)
                self._waiting = True
                break
            if self._waiting:
                log.warning("job logs are stored again")
                self._waiting = False
            self._held.pop(0)
            self._held_lines -= len(lines)
            seq = max((x.seq for x in lines), default=0)
            gap = self._gaps.get(batch.lease_id)
            if gap is not None:
                seq = min(seq, gap - 1)
            if seq > 0:
                ack = LogAck(
                    job_id=batch.job_id,
                    task_index=batch.task_index,
                    attempt=batch.attempt,
                    log_seq=seq,
                    lease_id=batch.lease_id,
                )
                self._send(worker_id, ack)
        while self._held_lines > MAX_HELD_LOG_LINES and len(self._held) > 1:
            _, dropped = self._held.pop()  # the newest: the worker's spool has them
            self._held_lines -= len(dropped.lines)
            if dropped.lines:
                first = min(x.seq for x in dropped.lines)
                self._gaps[dropped.lease_id] = min(first, self._gaps.get(dropped.lease_id, first))
