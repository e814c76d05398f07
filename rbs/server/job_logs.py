"""Job log lines on the server: SQLite rows, deduplicated, numbered per job, followable.

Workers number each run's lines (seq per lease) and spool them until acknowledged, so
after a reconnect or a server restart they re-send from the last acknowledged line.
The primary key (job, task, attempt, rank, worker seq) turns those re-sends into no-ops,
and each line that is new gets the job's next display sequence number: one gap-free
order over all tasks and attempts, which `rbs job logs -f` resumes from.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from rbs.model import LogLine, LogStream

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
