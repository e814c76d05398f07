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

from rbs.model import TERMINAL_STATES, UNKNOWN_USER, JobState
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Event
from rbs.scheduler.instructions import (
    Accepted,
    Instruction,
    JobChange,
    JobRecord,
    NodeRecord,
    PoolRecord,
    SaveJob,
    SaveTask,
    SaveWorker,
    TaskRecord,
    WorkerRecord,
)
from rbs.scheduler.journal_query import LISTING_INDEXES, JournalQuery
from rbs.wire.errors import StorageFull
from rbs.wire.manifest import manifest_from_json, manifest_to_json

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
                jobs.append(_job_row(ins.record, now))
            elif isinstance(ins, SaveTask):
                tasks.append(_task_row(ins.record))
            elif isinstance(ins, SaveWorker):
                workers.append((ins.record.worker_id, json.dumps(_worker_body(ins.record))))
        if not (jobs or tasks or workers or requests):
            return
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET "
                "state=excluded.state, reason=excluded.reason, body=excluded.body, "
                "updated=excluded.updated",
                jobs,
            )
            db.executemany("INSERT OR REPLACE INTO tasks VALUES (?,?,?,?,?,?)", tasks)
            db.executemany("INSERT OR REPLACE INTO workers VALUES (?,?)", workers)
            db.executemany("INSERT OR IGNORE INTO requests VALUES (?,?)", requests)
            db.execute("COMMIT")
        except BaseException as e:
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
            _job_record(*row)
            for row in self._db.execute(
                "SELECT id, manifest, provenance, submit_time, state, reason, body FROM jobs "
                f"{where} ORDER BY id"
            )
        ]
        tasks = [
            _task_record(*row)
            for row in self._db.execute(
                "SELECT job_id, idx, attempt, state, active, body FROM tasks WHERE active = 1"
            )
        ]
        workers = [
            _worker_record(wid, body)
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
        return None if row is None else _job_record(*row)

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
            _task_record(*row)
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


# ---- row codecs


def _job_row(r: JobRecord, now: float) -> tuple[Any, ...]:
    body = {
        "eligible_time": r.eligible_time,
        "time_limit": r.time_limit,
        "start_time": r.start_time,
        "end_time": r.end_time,
        "exit_code": r.exit_code,
        "attempts": r.attempts,
        "workers": list(r.workers),
        "signal": r.signal,
        "oom": r.oom,
        "peak_memory_bytes": r.peak_memory_bytes,
        "user": r.user,
        "parent": r.parent,
        "changes": [[c.action, c.by, c.at] for c in r.changes],
        "pool": {
            "range_i": r.pool.range_i,
            "next_value": r.pool.next_value,
            "retry": [list(t) for t in r.pool.retry],
            "skipped": list(r.pool.skipped),
            "counts": [list(c) for c in r.pool.counts],
        },
    }
    return (
        r.job_id,
        r.manifest.name,
        r.manifest.queue,
        manifest_to_json(r.manifest),
        json.dumps(r.provenance),
        r.submit_time,
        r.state.value,
        r.reason,
        json.dumps(body),
        now,
    )


def _job_record(
    job_id: int,
    manifest: str,
    provenance: str,
    submit_time: float,
    state: str,
    reason: str | None,
    body: str,
) -> JobRecord:
    b = json.loads(body)
    p = b["pool"]
    return JobRecord(
        job_id=job_id,
        manifest=manifest_from_json(manifest),
        provenance=tuple((k, v) for k, v in json.loads(provenance)),
        submit_time=submit_time,
        eligible_time=b["eligible_time"],
        time_limit=b["time_limit"],
        state=JobState(state),
        reason=reason,
        start_time=b["start_time"],
        end_time=b["end_time"],
        exit_code=b["exit_code"],
        pool=PoolRecord(
            range_i=p["range_i"],
            next_value=p["next_value"],
            # Rows of an older journal have no restart count: none were counted then.
            retry=tuple((t[0], t[1], t[2], t[3] if len(t) > 3 else 0) for t in p["retry"]),
            skipped=tuple(p["skipped"]),
            counts=tuple((s, n) for s, n in p["counts"]),
        ),
        attempts=b["attempts"],
        workers=tuple(b["workers"]),
        signal=b["signal"],
        oom=b["oom"],
        peak_memory_bytes=b["peak_memory_bytes"],
        # Rows written before jobs had owners have none of these three.
        user=b.get("user", UNKNOWN_USER),
        parent=b.get("parent"),
        changes=tuple(JobChange(action=a, by=u, at=t) for a, u, t in b.get("changes", ())),
    )


def _task_row(r: TaskRecord) -> tuple[Any, ...]:
    body = {
        "nodes": [
            [
                n.rank,
                n.worker_id,
                n.cpu_millis,
                n.memory_bytes,
                list(n.gpus),
                n.master_port,
                n.exited,
            ]
            for n in r.nodes
        ],
        "start_time": r.start_time,
        "confirmed_time": r.confirmed_time,
        "deadline": r.deadline,
        "end_time": r.end_time,
        "ending": r.ending,
        "retries_used": r.retries_used,
        "restarts_used": r.restarts_used,
        "reason": r.reason,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "oom": r.oom,
        "peak_memory_bytes": r.peak_memory_bytes,
    }
    idx = -1 if r.index is None else r.index
    return (r.job_id, idx, r.attempt, r.state.value, int(r.active), json.dumps(body))


def _task_record(
    job_id: int, idx: int, attempt: int, state: str, active: int, body: str
) -> TaskRecord:
    b = json.loads(body)
    return TaskRecord(
        job_id=job_id,
        index=None if idx < 0 else idx,
        attempt=attempt,
        state=JobState(state),
        nodes=tuple(
            NodeRecord(
                rank=rank,
                worker_id=wid,
                cpu_millis=cpu,
                memory_bytes=mem,
                gpus=tuple(gpus),
                master_port=port,
                exited=exited,
            )
            for rank, wid, cpu, mem, gpus, port, exited in b["nodes"]
        ),
        start_time=b["start_time"],
        confirmed_time=b["confirmed_time"],
        deadline=b["deadline"],
        end_time=b["end_time"],
        ending=b["ending"],
        retries_used=b["retries_used"],
        restarts_used=b.get("restarts_used", 0),
        reason=b.get("reason"),
        exit_code=b["exit_code"],
        signal=b["signal"],
        oom=b["oom"],
        peak_memory_bytes=b["peak_memory_bytes"],
        active=bool(active),
    )


def _worker_body(r: WorkerRecord) -> dict[str, Any]:
    return {
        "hostname": r.hostname,
        "address": r.address,
        "cpu_millis": r.cpu_millis,
        "memory_bytes": r.memory_bytes,
        "gpus": list(r.gpus),
        "job_slots": r.job_slots,
        "master_ports": list(r.master_ports),
        "alive": r.alive,
    }


def _worker_record(worker_id: str, body: str) -> WorkerRecord:
    b = json.loads(body)
    return WorkerRecord(
        worker_id=worker_id,
        hostname=b["hostname"],
        address=b["address"],
        cpu_millis=b["cpu_millis"],
        memory_bytes=b["memory_bytes"],
        gpus=tuple(b["gpus"]),
        job_slots=b["job_slots"],
        master_ports=(b["master_ports"][0], b["master_ports"][1]),
        alive=b["alive"],
    )
