"""The SQLite journal: what a restarted scheduler rebuilds is what was acknowledged."""

from __future__ import annotations

import dataclasses
import random
import sqlite3
from pathlib import Path

import pytest
from sched_harness import manifest, starts, worker_up

from rbs.model import JobState
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import RunRef, Submit, TaskExited, Tick, Update
from rbs.scheduler.instructions import Accepted, Instruction, Start
from rbs.scheduler.sim import Outcome, Simulator
from rbs.scheduler.store import Store, StoreError
from rbs.wire.specs import parse_array, parse_dependencies

CONFIG = SchedulerConfig(heartbeat_timeout=30)


def _workload(sim: Simulator) -> None:
    for w in range(3):
        sim.add_worker(worker_up(f"w{w}", cpus=4, mem_gb=16, gpus=2, slots=4))
    sim.submit(manifest(name="arr", array=parse_array("0-49%7"), res=(1, 1, 0), time_limit=20))
    for i in range(12):
        deps = parse_dependencies(f"afterany:{i}") if i > 1 else ()
        sim.submit(
            manifest(
                name=f"j{i}",
                res=(1 + i % 3, 2, i % 3),
                priority=i % 4,
                dependencies=deps,
                max_retries=1,
            ),
            time=0.5 * i,
        )
    sim.submit(manifest(name="gang", nodes=2, res=(1, 1, 0)), time=3.0)


def _behaviour() -> Outcome:
    rng = random.Random(7)

    def pick(_: Start) -> Outcome:
        return Outcome(
            duration=rng.uniform(1, 30), exit_code=rng.choice((0, 0, 0, 1)), peak_memory_bytes=100
        )

    return pick  # type: ignore[return-value]


def _journaled_sim(path: Path) -> tuple[Simulator, Store]:
    store = Store(path)
    sched = Scheduler(CONFIG, validate=True)
    sim = Simulator(sched, _behaviour(), tick=1.0)  # type: ignore[arg-type]

    def journal(out: list[Instruction], now: float) -> None:
        store.apply(out, now)

    sim.on_instructions = journal
    _workload(sim)
    return sim, store


@pytest.mark.parametrize("stop_after", [1, 40, 150, 100_000])
def test_reopened_journal_rebuilds_an_identical_scheduler(tmp_path: Path, stop_after: int) -> None:
    sim, store = _journaled_sim(tmp_path / "j.db")
    sim.run(max_events=stop_after)
    before = sim.scheduler.snapshot()
    # No close(): as after kill -9, only what was committed is there.
    reopened = Store(tmp_path / "j.db")
    restored = reopened.restore(CONFIG, now=sim.now, validate=True)
    assert restored.snapshot() == before
    for jid in sim.scheduler.job_ids():
        assert restored.job(jid).state == sim.scheduler.job(jid).state
        assert restored.job(jid).reason == sim.scheduler.job(jid).reason
    del store


def test_a_finished_workload_restores_all_terminal(tmp_path: Path) -> None:
    sim, _ = _journaled_sim(tmp_path / "j.db")
    sim.run()
    assert not sim.scheduler.has_unfinished_jobs()
    restored = Store(tmp_path / "j.db").restore(CONFIG, now=sim.now)
    assert not restored.has_unfinished_jobs()
    assert restored.snapshot() == sim.scheduler.snapshot()


def _running_world(path: Path) -> tuple[Store, Scheduler, int, int]:
    store = Store(path)
    sched = Scheduler(CONFIG, validate=True)
    out = sched.handle(worker_up("w", slots=2), 0.0)
    store.apply(out, 0.0)
    ids = []
    for _ in range(3):
        out = sched.handle(Submit(manifest=manifest()), 1.0)
        store.apply(out, 1.0)
        ids.append(next(i.job_id for i in out if type(i).__name__ == "Accepted"))  # type: ignore[union-attr]
    return store, sched, ids[0], ids[2]


def test_running_jobs_stay_running_until_their_worker_reports(tmp_path: Path) -> None:
    _, _, running, pending = _running_world(tmp_path / "j.db")
    restored = Store(tmp_path / "j.db").restore(CONFIG, now=100.0, validate=True)
    assert restored.job(running).state is JobState.RUNNING
    assert restored.job(pending).state is JobState.PENDING
    # The first pass after a restart starts nothing new: both slots are still held.
    assert starts(restored.handle(Tick(), 100.0)) == []
    # The worker reconnects still running both: nothing is started twice.
    up = worker_up("w", slots=2, running=(RunRef(job_id=1), RunRef(job_id=2)))
    out = restored.handle(up, 101.0)
    assert starts(out) == []
    assert restored.job(running).attempts == 1


def test_a_worker_that_never_returns_has_its_jobs_requeued(tmp_path: Path) -> None:
    _, _, running, _ = _running_world(tmp_path / "j.db")
    restored = Store(tmp_path / "j.db").restore(CONFIG, now=100.0, validate=True)
    assert starts(restored.handle(Tick(), 129.0)) == []  # inside its reconnect grace
    restored.handle(Tick(), 131.0)
    assert restored.job(running).state is JobState.PENDING
    out = restored.handle(worker_up("w2", slots=3), 132.0)
    assert sorted((s.run.job_id, s.run.attempt) for s in starts(out)) == [(1, 2), (2, 2), (3, 1)]


def test_transitions_and_history_are_journaled(tmp_path: Path) -> None:
    store, sched, running, _ = _running_world(tmp_path / "j.db")
    out = sched.handle(TaskExited(run=RunRef(job_id=running), worker_id="w", exit_code=0), 5.0)
    store.apply(out, 5.0)
    # One row per journaled state: submitted and started in one step shows as RUNNING.
    states = [(t.state, t.at) for t in store.transitions(running)]
    assert states == [(JobState.RUNNING, 1.0), (JobState.COMPLETED, 5.0)]
    pending = store.transitions(3)
    assert [t.state for t in pending] == [JobState.PENDING, JobState.RUNNING]
    assert pending[0].reason == "Resources" and pending[1].at == 5.0
    (task,) = store.task_history(running)
    assert task.state is JobState.COMPLETED and not task.active and task.exit_code == 0


def test_a_journal_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "j.db").close()
    db = sqlite3.connect(tmp_path / "j.db")
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Store(tmp_path / "j.db")


def test_journal_is_wal_and_fully_synchronous(tmp_path: Path) -> None:
    store = Store(tmp_path / "j.db")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.close()


def test_an_updated_pending_job_is_restored_as_updated(tmp_path: Path) -> None:
    """`rbs job update` writes the new manifest: a restart keeps it, as does `show` of an
    ended job (both read the journal's row)."""
    store, sched, _, pending = _running_world(tmp_path / "j.db")
    new = dataclasses.replace(
        sched.job(pending).manifest, priority=-3, time_limit=300, begin_time=5000.0
    )
    out = sched.handle(Update(job_id=pending, manifest=new, by="alice", admin=False), 2.0)
    assert any(isinstance(i, Accepted) for i in out)
    store.apply(out, 2.0)
    restored = Store(tmp_path / "j.db").restore(CONFIG, now=3.0, validate=True)
    got = restored.job(pending)
    assert (got.manifest.priority, got.manifest.time_limit) == (-3, 300)
    assert got.manifest.begin_time == 5000.0
    assert got.reason == "BeginTime"


def _row(store: Store, job_id: int) -> tuple[str, str]:
    row = store._db.execute("SELECT state, body FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return row[0], row[1]


def test_an_array_s_row_keeps_its_state_through_body_only_writes_and_a_failed_one(
    tmp_path: Path,
) -> None:
    """Each task of an array rewrites its job's row; with the state unchanged only the
    body is written. A write that fails leaves nothing assumed: the next one is whole."""
    store = Store(tmp_path / "j.db")
    sched = Scheduler(CONFIG, validate=True)
    store.apply(sched.handle(worker_up("w", slots=4), 0.0), 0.0)
    out = sched.handle(Submit(manifest=manifest(name="arr", array=parse_array("0-3"))), 1.0)
    store.apply(out, 1.0)
    job = next(i.job_id for i in out if isinstance(i, Accepted))
    assert _row(store, job)[0] == "RUNNING"
    for index in range(2):  # tasks end, the job stays RUNNING: body-only writes
        out = sched.handle(
            TaskExited(run=RunRef(job_id=job, index=index), worker_id="w", exit_code=0), 2.0
        )
        store.apply(out, 2.0)
        saved = Store(tmp_path / "j.db").restore(CONFIG, now=2.0, validate=True).job(job)
        assert saved.state is JobState.RUNNING
        assert saved.array is not None
        assert saved.array.finished == (("COMPLETED", index + 1),)
    # The last two tasks end, and the job with them, in a write the journal refuses once.
    ends = [TaskExited(run=RunRef(job_id=job, index=i), worker_id="w", exit_code=0) for i in (2, 3)]
    store._db.execute(
        "CREATE TEMP TRIGGER refuse BEFORE UPDATE ON jobs BEGIN SELECT RAISE(ABORT, 'no'); END"
    )
    out = sched.handle_many(ends, 3.0)
    with pytest.raises(sqlite3.Error):
        store.apply(out, 3.0)
    store._db.execute("DROP TRIGGER refuse")
    assert _row(store, job)[0] == "RUNNING"
    store.apply(out, 3.0)  # the same instructions, written again
    assert sched.job(job).state is JobState.COMPLETED
    assert _row(store, job)[0] == "COMPLETED"
    restored = Store(tmp_path / "j.db").restore(CONFIG, now=4.0, validate=True)
    assert restored.job(job).state is JobState.COMPLETED
