"""A scheduler step is atomic with its journal write: a write that fails changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sched_harness import manifest, starts, worker_up

from rbs.model import JobState
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.events import RunRef, Submit, TaskExited, TaskStarted
from rbs.scheduler.instructions import Accepted
from rbs.scheduler.store import Store
from rbs.wire.errors import StorageFull

CONFIG = SchedulerConfig(heartbeat_timeout=1e9, validate=True)


class _FullDisk:
    """The journal's connection, but its COMMIT fails as SQLite's does on a full disk: the
    transaction is rolled back by SQLite itself, then the error is raised."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.full = False

    def execute(self, sql: str, *args: Any) -> Any:
        if self.full and sql == "COMMIT":
            self._db.execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def _accepted(out: list[Any]) -> list[int]:
    return [i.job_id for i in out if isinstance(i, Accepted)]


def test_a_step_whose_write_fails_leaves_the_core_and_the_id_counter_as_they_were(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "jobs.db")
    disk = _FullDisk(store._db)
    store._db = disk  # type: ignore[assignment]
    sched = store.restore(CONFIG, 0.0)
    out = store.step(sched, [worker_up("w1", slots=1), Submit(manifest=manifest())], 1.0)
    (first,) = _accepted(out)
    (start,) = starts(out)
    store.step(sched, [TaskStarted(run=start.run, worker_id="w1")], 2.0)
    before = sched.snapshot()

    disk.full = True
    exited = TaskExited(run=start.run, worker_id="w1", exit_code=0)
    with pytest.raises(StorageFull) as err:
        store.step(
            sched,
            [exited, Submit(manifest=manifest(name="b"), event_id="b")],
            3.0,
            request_ids={"b": "req-b"},
        )
    assert str(err.value) == (
        f"free space under {tmp_path} (the job journal could not be written: "
        "database or disk is full)"
    )
    assert sched.snapshot() == before
    assert sched.job_ids() == [first]
    assert sched.job(first).state is JobState.RUNNING
    assert store.requests() == {}

    # Space is back: the held exit and a new submit go in, with the next id (no gap), and
    # the freed slot goes to the new job at once.
    disk.full = False
    out = store.step(
        sched,
        [exited, Submit(manifest=manifest(name="c"), event_id="c")],
        4.0,
        request_ids={"c": "req-c"},
    )
    assert _accepted(out) == [first + 1]
    assert sched.job(first).state is JobState.COMPLETED
    assert [s.run for s in starts(out)] == [RunRef(job_id=first + 1, index=None, attempt=1)]
    assert store.requests() == {"req-c": first + 1}

    # The journal holds exactly that: a restart rebuilds the same scheduler.
    again = Store(tmp_path / "jobs.db").restore(CONFIG, 4.0)
    assert again.snapshot() == sched.snapshot()


def test_a_failed_submit_write_raises_the_storage_error_not_a_rollback_error(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "jobs.db")
    disk = _FullDisk(store._db)
    store._db = disk  # type: ignore[assignment]
    sched = store.restore(CONFIG, 0.0)
    disk.full = True
    for _ in range(3):  # every try fails the same way, and no id is used up
        with pytest.raises(StorageFull):
            store.step(sched, [Submit(manifest=manifest())], 1.0)
        assert sched.job_ids() == []
    disk.full = False
    (job_id,) = _accepted(store.step(sched, [Submit(manifest=manifest())], 2.0))
    assert job_id == 1


def test_a_step_the_core_fails_midway_is_undone_too(tmp_path: Path) -> None:
    store = Store(tmp_path / "jobs.db")
    sched = store.restore(CONFIG, 0.0)
    with pytest.raises(TypeError, match="not a scheduler event"):
        store.step(sched, [Submit(manifest=manifest()), "bogus"], 1.0)  # type: ignore[list-item]
    assert sched.job_ids() == []
    (job_id,) = _accepted(store.step(sched, [Submit(manifest=manifest())], 2.0))
    assert job_id == 1
