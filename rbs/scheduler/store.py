"""The scheduler's SQLite journal: job, run and worker rows, and every job-state transition.

WAL mode with `synchronous=FULL`: a commit returns only once its WAL frames are fsynced,
so what the server acknowledged survives a machine crash too, not just kill -9 (for which
NORMAL would do). The cost is one fsync per commit; the driver commits once per batch of
events, so under load one fsync covers many submissions. `durable=False` selects NORMAL.

Rows are written from the Save* instructions only; a restart rebuilds the scheduler with
`Store.restore`, which loads every job and the runs still active. `Store.step` makes a
scheduler step atomic with its write: when the transaction fails (the disk is full), the
scheduler is rebuilt from the journal, which holds exactly the state before the step.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbs.model import TERMINAL_STATES, JobState
from rbs.scheduler import store_rows as rows
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Event
from rbs.scheduler.instructions import (
    Accepted,
    Instruction,
    JobRecord,
    SaveJob,
    SaveTask,
    SaveWorker,
    TaskRecord,
    WorkerRecord,
)
from rbs.scheduler.journal_query import LISTING_INDEXES, JournalQuery
from rbs.wire.errors import StorageFull

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    queue TEXT NOT NULL,
    manifest TEXT NOT NULL,
    provenance TEXT NOT NULL,
    submit_time REAL NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    body TEXT NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE TABLE IF NOT EXISTS tasks (
    job_id INTEGER NOT NULL,
    idx INTEGER NOT NULL,  -- -1 for a job that is not an array
    attempt INTEGER NOT NULL,
    state TEXT NOT NULL,
    active INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, idx, attempt)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tasks_active ON tasks (active) WHERE active = 1;
CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions (job_id);
-- A client's submit request id -> the job it made, so a retried submit makes no second job.
CREATE TABLE IF NOT EXISTS requests (id TEXT PRIMARY KEY, job_id INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS jobs_born AFTER INSERT ON jobs BEGIN
    INSERT INTO transitions (job_id, state, reason, at)
    VALUES (NEW.id, NEW.state, NEW.reason, NEW.updated);
END;
CREATE TRIGGER IF NOT EXISTS jobs_moved AFTER UPDATE OF state ON jobs
WHEN OLD.state != NEW.state BEGIN
    INSERT INTO transitions (job_id, state, reason, at)
    VALUES (NEW.id, NEW.state, NEW.reason, NEW.updated);
END;
"""


class StoreError(RuntimeError):
    """The journal cannot be used (wrong schema version, corrupt rows)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """One recorded job-state change."""

    job_id: int
    state: JobState
    reason: str | None
    at: float


class Store:
    """A SQLite journal of scheduler records, written one transaction per `apply`."""

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = Path(path)
        self._rows = rows.RowCodec()
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._db.executescript(LISTING_INDEXES)
        row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is None:
            self._db.execute(
                "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
            )
        elif int(row[0]) != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: journal schema version {row[0]}, this rbs reads {SCHEMA_VERSION}"
            )

    def close(self) -> None:
        self._db.close()

    def step(
        self,
        sched: Scheduler,
        events: Sequence[Event],
        now: float,
        *,
        request_ids: Mapping[str, str] | None = None,
    ) -> list[Instruction]:
        """`sched.handle_many(events, now)` and its journal write, as one step: if either
        fails, `sched` is rebuilt from the journal (the state before the step, the job id
        counter included) and the error is raised. `request_ids` maps a Submit's event id
        to the client's request id, journaled with the job it made."""
        try:
            # A core that raised midway is rebuilt too: the journal is its last good state.
            instructions = sched.handle_many(events, now)
            requests = []
            if request_ids:
                requests = [
                    (request_ids[ins.event_id], ins.job_id)
                    for ins in instructions
                    if isinstance(ins, Accepted) and ins.job_id and ins.event_id in request_ids
                ]
            self.apply(instructions, now, requests=requests)
        except Exception:
            again = self.restore(sched.config, now, sched.validate, forget_ended=sched.forget_ended)
            sched.adopt(again)
            raise
        return instructions

    def apply(
        self,
        instructions: Iterable[Instruction],
        now: float,
        *,
        requests: Iterable[tuple[str, int]] = (),
    ) -> None:
        """Write every Save* instruction (and request id -> job id) in one transaction;
        other instructions are skipped. A full disk raises StorageFull naming the folder."""
        requests = list(requests)
        jobs, tasks, workers = [], [], []
        for ins in instructions:
            if isinstance(ins, SaveJob):
                jobs.append(self._rows.job_row(ins.record, now))
            elif isinstance(ins, SaveTask):
                tasks.append(rows.task_row(ins.record))
            elif isinstance(ins, SaveWorker):
                workers.append((ins.record.worker_id, json.dumps(rows.worker_body(ins.record))))
        if not (jobs or tasks or workers or requests):
            return
        # A row whose manifest, provenance and state are those last written (each task of
        # an array) updates its body alone; two rows of one job keep their order in full.
        split = [(self._rows.body_only(row), row) for row in jobs]
        bodies: list[tuple[Any, ...]] = []
        if len({row[0] for row in jobs}) == len(jobs):
            bodies = [(row[7], row[8], row[9], row[0]) for same, row in split if same]
            jobs = [row for same, row in split if not same]
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            if jobs:
                db.executemany(
                    "INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET "
                    "state=excluded.state, reason=excluded.reason, body=excluded.body, "
                    "updated=excluded.updated, queue=excluded.queue, "  # `rbs job update`
                    "manifest=excluded.manifest, provenance=excluded.provenance",  # these 3
                    jobs,
                )
            if bodies:
                db.executemany("UPDATE jobs SET reason=?, body=?, updated=? WHERE id=?", bodies)
            if tasks:  # an empty executemany still costs a statement's round
                db.executemany("INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?)", tasks)
            if workers:
                db.executemany("INSERT OR REPLACE INTO workers VALUES (?,?)", workers)
            if requests:
                db.executemany("INSERT OR IGNORE INTO requests VALUES (?,?)", requests)
            db.execute("COMMIT")
        except BaseException as e:
            self._rows.forget()
            # SQLite may have rolled back already (it does on SQLITE_FULL): a second
            # ROLLBACK would fail and hide the real error.
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            if isinstance(e, sqlite3.Error) and _is_full(e):
                raise StorageFull(
                    f"free space under {self.path.parent} (the job journal could not be "
                    f"written: {e})"
                ) from e
            raise

    # ---- reading back

    def load(self, where: str = "") -> tuple[list[JobRecord], list[TaskRecord], list[WorkerRecord]]:
        """Every job (or those `where` selects), the active runs, and every worker."""
        jobs = [
            rows.job_record(*row)
            for row in self._db.execute(
                "SELECT id, manifest, provenance, submit_time, state, reason, body FROM jobs "
                f"{where} ORDER BY id"
            )
        ]
        tasks = [
            rows.task_record(*row)
            for row in self._db.execute(
                "SELECT job_id, idx, attempt, state, active, body FROM tasks WHERE active = 1"
            )
        ]
        workers = [
            rows.worker_record(wid, body)
            for wid, body in self._db.execute("SELECT id, body FROM workers")
        ]
        return jobs, tasks, workers

    def restore(
        self,
        config: SchedulerConfig | None,
        now: float,
        validate: bool | None = None,
        *,
        forget_ended: bool = False,
    ) -> Scheduler:
        """The scheduler the journal holds. With `forget_ended` an ended job is read as
        its id, final state and parent only (rbs/scheduler/compaction.py), unless one of
        its attempts is still being stopped."""
        if not forget_ended:
            jobs, tasks, workers = self.load()
            return Scheduler.restore(
                config, jobs=jobs, tasks=tasks, workers=workers, now=now, validate=validate
            )
        ended = ", ".join(f"'{s.value}'" for s in TERMINAL_STATES)
        busy = "id IN (SELECT job_id FROM tasks WHERE active = 1)"
        jobs, tasks, workers = self.load(f"WHERE state NOT IN ({ended}) OR {busy}")
        rows = self._db.execute(
            "SELECT id, state, json_extract(body, '$.parent') FROM jobs "
            f"WHERE state IN ({ended}) AND NOT {busy} ORDER BY id"
        )
        return Scheduler.restore(
            config,
            jobs=jobs,
            tasks=tasks,
            workers=workers,
            now=now,
            validate=validate,
            ended=((i, JobState(s), p) for i, s, p in rows),
            forget_ended=True,
        )

    def requests(self) -> dict[str, int]:
        """Every journaled submit request id and the job it made."""
        return dict(self._db.execute("SELECT id, job_id FROM requests"))

    def request_job(self, request_id: str) -> int | None:
        """The job a journaled submit request id made (None if none)."""
        row = self._db.execute("SELECT job_id FROM requests WHERE id = ?", (request_id,))
        found = row.fetchone()
        return None if found is None else int(found[0])

    def query(self) -> JournalQuery:
        """Paged listing queries on this journal (rbs.scheduler.journal_query)."""
        return JournalQuery(self._db)

    def job_record(self, job_id: int) -> JobRecord | None:
        """One job as journaled (None if unknown): how an ended job is shown."""
        row = self._db.execute(
            "SELECT id, manifest, provenance, submit_time, state, reason, body FROM jobs "
            "WHERE id = ?",
            (job_id,),
        ).fetchone()
        return None if row is None else rows.job_record(*row)

    def task_history(
        self, job_id: int, index: int | None = None, limit: int = -1
    ) -> list[TaskRecord]:
        """Every recorded attempt of a task (all tasks of the job when index is None), the
        first `limit` of them in task and attempt order when `limit` is not -1."""
        sql = "SELECT job_id, idx, attempt, state, active, body FROM tasks WHERE job_id = ?"
        args: tuple[int, ...] = (job_id,)
        if index is not None:
            sql += " AND idx = ?"
            args = (job_id, index)
        return [
            rows.task_record(*row)
            for row in self._db.execute(sql + " ORDER BY idx, attempt LIMIT ?", (*args, limit))
        ]

    def transitions(self, job_id: int) -> list[Transition]:
        rows = self._db.execute(
            "SELECT job_id, state, reason, at FROM transitions WHERE job_id = ? ORDER BY seq",
            (job_id,),
        )
        return [Transition(job_id=j, state=JobState(s), reason=r, at=a) for j, s, r, a in rows]


def _is_full(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "database or disk is full" in str(e)
