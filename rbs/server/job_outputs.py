"""Output and checkpoint tree digests per run, as workers report them (job_outputs.db)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from rbs.model import Digest
from rbs.scheduler.events import RunRef


class JobOutputs:
    """Output tree digests per run, as workers report them."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        db.execute(
            "CREATE TABLE IF NOT EXISTS outputs (job_id INTEGER, task INTEGER, attempt INTEGER, "
            "digest TEXT NOT NULL, time REAL NOT NULL, PRIMARY KEY (job_id, task, attempt))"
        )
        # The newest checkpoint of each task, restored into its next attempt.
        db.execute(
            "CREATE TABLE IF NOT EXISTS checkpoints (job_id INTEGER, task INTEGER, "
            "attempt INTEGER, digest TEXT NOT NULL, PRIMARY KEY (job_id, task))"
        )

    def record(self, run: RunRef, digest: Digest) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO outputs VALUES (?,?,?,?,?)",
            (
                run.job_id,
                -1 if run.index is None else run.index,
                run.attempt,
                str(digest),
                time.time(),
            ),
        )

    def record_checkpoint(self, run: RunRef, digest: Digest) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?)",
            (run.job_id, -1 if run.index is None else run.index, run.attempt, str(digest)),
        )

    def checkpoint(self, job_id: int, index: int | None) -> Digest | None:
        row = self._db.execute(
            "SELECT digest FROM checkpoints WHERE job_id = ? AND task = ?",
            (job_id, -1 if index is None else index),
        ).fetchone()
        return Digest.parse(row[0]) if row else None

    def latest(self, job_id: int) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT task, attempt, digest FROM outputs o WHERE job_id = ? AND attempt = "
            "(SELECT MAX(attempt) FROM outputs WHERE job_id = o.job_id AND task = o.task) ORDER BY task",
            (job_id,),
        ).fetchall()
        return [{"task": None if t == -1 else t, "attempt": a, "digest": d} for t, a, d in rows]
