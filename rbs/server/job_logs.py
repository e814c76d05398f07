"""Job log lines on the server: SQLite rows, deduplicated, numbered per job, followable.

Workers number each run's lines (seq per lease) and spool them until acknowledged, so
after a reconnect or a server restart they re-send from the last acknowledged line.
The primary key (job, task, attempt, rank, worker seq) turns those re-sends into no-ops,
and each line that is new gets the job's next display sequence number: one gap-free
order over all tasks and attempts, which `rbs job logs -f` resumes from.

`LogIntake` acknowledges a batch only once it is stored: when the store cannot write
(disk full), batches wait in memory, in order, unacknowledged (so the worker keeps them
in its spool too), and go in once it can.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from rbs.model import LogLine, LogStream
from rbs.wire.workers_jobs import JobOrder, LogAck, LogBatch

log = logging.getLogger(__name__)

# Log lines kept in memory while the store cannot write; past this, the worker's spool
# keeps them (they come again when it reconnects).
MAX_HELD_LOG_LINES = 200_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lines (
    job_id INTEGER NOT NULL,
    task INTEGER NOT NULL,      -- -1 when the job is not an array
    attempt INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    wseq INTEGER NOT NULL,      -- the worker's number for the line within its run
    seq INTEGER NOT NULL,       -- the job's display order
    time REAL NOT NULL,
    stream TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (job_id, task, attempt, rank, wseq)
);
CREATE UNIQUE INDEX IF NOT EXISTS lines_seq ON lines (job_id, seq);
"""


class JobLogs:
    """The log table plus in-memory wake-ups for followers."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # A line is acknowledged to the worker (which then drops it) only after commit;
        # NORMAL keeps the commit durable against a process crash, which is what the
        # worker's spool protects against; a power loss may lose the newest lines.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._next: dict[int, int] = {}
        self._waiters: dict[int, asyncio.Event] = {}

    def close(self) -> None:
        self._db.close()

    def _next_seq(self, job_id: int) -> int:
        n = self._next.get(job_id)
        if n is None:
            row = self._db.execute(
                "SELECT MAX(seq) FROM lines WHERE job_id = ?", (job_id,)
            ).fetchone()
            n = (row[0] or 0) + 1
        return n

    def append(self, job_id: int, lines: Iterable[LogLine]) -> int:
        """Store new lines, each numbered by its run's worker (re-sent ones are ignored);
        returns how many were new."""
        seq = self._next_seq(job_id)
        added = 0
        db = self._db
        db.execute("BEGIN")
        try:
            for ln in lines:
                task = -1 if ln.task is None else ln.task
                row = (job_id, task, ln.attempt, ln.rank, ln.seq, seq, ln.time)
                cur = db.execute(
                    "INSERT OR IGNORE INTO lines VALUES (?,?,?,?,?,?,?,?,?)",
                    (*row, ln.stream.value, ln.text),
                )
                if cur.rowcount:
                    seq += 1
                    added += 1
            db.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (it does when the disk is full).
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            self._next.pop(job_id, None)
            raise
        self._next[job_id] = seq
        if added:
            self.wake(job_id)
        return added

    def read(
        self,
        job_id: int,
        *,
        after: int = 0,
        task: int | None = None,
        tail: int | None = None,
        limit: int = 5000,
    ) -> list[LogLine]:
        """Lines in the job's display order: `seq` is the job's number, not the worker's."""
        sql = "SELECT seq, time, stream, text, task, attempt, rank FROM lines WHERE job_id = ? AND seq > ?"
        args: list[int] = [job_id, after]
        if task is not None:
            sql += " AND task = ?"
            args.append(task)
        if tail is not None:
            rows = self._db.execute(sql + " ORDER BY seq DESC LIMIT ?", (*args, tail)).fetchall()
            rows.reverse()
        else:
            rows = self._db.execute(sql + " ORDER BY seq LIMIT ?", (*args, limit)).fetchall()
        return [
            LogLine(
                seq=s,
                time=tm,
                stream=LogStream(st),
                text=tx,
                task=None if tk == -1 else tk,
                attempt=a,
                rank=r,
            )
            for s, tm, st, tx, tk, a, r in rows
        ]

    def wake(self, job_id: int) -> None:
        ev = self._waiters.pop(job_id, None)
        if ev is not None:
            ev.set()

    async def wait(self, job_id: int, timeout: float) -> None:
        """Return when the job has new lines or changed state, or after `timeout`."""
        ev = self._waiters.setdefault(job_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ev.wait(), timeout)


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
