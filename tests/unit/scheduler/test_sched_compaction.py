"""Ended jobs compacted out of the core (`forget_ended`): what still works, what it keeps."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
from sched_harness import Harness, manifest, starts, worker_up

from rbs.model import Dependency, DepKind, JobState
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Submit, TaskExited, Update
from rbs.scheduler.instructions import Accepted, Rejected, SaveJob
from rbs.scheduler.state import SchedulerError
from rbs.scheduler.store import Store

CONFIG = SchedulerConfig(heartbeat_timeout=1e9)


def forgetting() -> Harness:
    h = Harness(CONFIG)
    h.sched = Scheduler(CONFIG, validate=True, forget_ended=True)
    return h


def test_an_ended_job_leaves_the_core_and_its_state_stays_for_dependencies() -> None:
    h = forgetting()
    h.up("w1", slots=2)
    a = h.submit(name="a")
    b = h.submit(name="b", dependencies=(Dependency(kind=DepKind.AFTEROK, job_id=a),))
    out = h.exit(a)
    assert any(isinstance(i, SaveJob) and i.record.job_id == a for i in out)  # journaled
    assert a not in h.sched.job_ids()
    with pytest.raises(SchedulerError, match=f"unknown job id {a}"):
        h.sched.job(a)
    assert h.sched.job_states()[a] is JobState.COMPLETED
    assert h.state(b) is JobState.RUNNING
    assert h.sched.job(b).dependencies == ((f"afterok:{a}", JobState.COMPLETED),)
    # A dependency submitted after the job was forgotten reads its final state.
    c = h.submit(name="c", dependencies=(Dependency(kind=DepKind.AFTERNOTOK, job_id=a),))
    assert c not in h.sched.job_ids()  # never satisfiable: cancelled, ended, forgotten
    assert h.sched.job_states()[c] is JobState.CANCELLED
    d = h.submit(name="d", dependencies=(Dependency(kind=DepKind.AFTEROK, job_id=a),))
    assert h.state(d) is JobState.RUNNING
    assert "unknown job id 99" in h.reject(
        manifest(dependencies=(Dependency(kind=DepKind.AFTEROK, job_id=99),))
    )


def test_cancel_update_and_requeue_of_a_forgotten_job() -> None:
    h = forgetting()
    h.up("w1")
    a = h.submit()
    h.exit(a, code=1)
    assert h.sched.job_states()[a] is JobState.FAILED
    out = h.cancel(str(a))
    assert not [i for i in out if isinstance(i, Rejected)]  # nothing to do, as for an ended job
    out = h.send(Update(job_id=a, manifest=manifest(priority=5)))
    (rej,) = [i for i in out if isinstance(i, Rejected)]
    assert rej.message == f"job {a} is FAILED: only a pending job can be updated"
    (rej,) = [i for i in h.cancel("42") if isinstance(i, Rejected)]
    assert "unknown job id 42" in rej.message


def test_a_job_stays_while_an_attempt_of_it_is_still_stopping() -> None:
    h = forgetting()
    h.up("w1")
    h.up("w2")
    gang = h.submit(nodes=2)
    out = h.last
    assert len(starts(out)) == 2
    h.exit(gang, rank=0)  # rank 0 decides the end; rank 1 is told to stop
    assert h.sched.job_states()[gang] is JobState.COMPLETED
    assert gang in h.sched.job_ids()  # rank 1 still holds its worker
    worker = next(s.worker_id for s in starts(out) if s.run.rank == 1)
    h.exit(gang, rank=1, worker=worker, code=143)
    assert gang not in h.sched.job_ids()
    assert h.sched.job_states()[gang] is JobState.COMPLETED


def test_restore_keeps_ended_jobs_as_their_state_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "jobs.db")
    sched = Scheduler(CONFIG, validate=True, forget_ended=True)
    out = store.step(sched, [worker_up("w1", slots=4)], 0.0)
    for i in range(4):
        out += store.step(sched, [Submit(manifest=manifest(name=f"j{i}"))], 1.0)
    after = manifest(name="after", dependencies=(Dependency(kind=DepKind.AFTEROK, job_id=4),))
    out += store.step(sched, [Submit(manifest=after)], 1.0)  # job 5 waits on job 4
    for s in starts(out):
        if s.run.job_id != 4:
            store.step(sched, [TaskExited(run=s.run, worker_id=s.worker_id, exit_code=0)], 2.0)
    assert sched.job_ids() == [4, 5]
    before = sched.snapshot()
    assert [j for j, _ in before.ended] == [1, 2, 3]
    restored = store.restore(CONFIG, 3.0, validate=True, forget_ended=True)
    assert restored.snapshot() == before
    assert restored.job_states() == sched.job_states()
    # Job ids go on from the forgotten ones; a new dependency on one of them is read.
    on_1 = manifest(name="on-1", dependencies=(Dependency(kind=DepKind.AFTEROK, job_id=1),))
    (acc,) = [i for i in restored.handle(Submit(manifest=on_1), 4.0) if isinstance(i, Accepted)]
    assert acc.job_id == 6
    assert restored.job(6).dependencies == (("afterok:1", JobState.COMPLETED),)
    # Without compaction the same journal restores every job.
    assert store.restore(CONFIG, 3.0).job_ids() == [1, 2, 3, 4, 5]


def test_ended_jobs_cost_the_core_no_objects() -> None:
    """Thousands of jobs through the core: once ended, each leaves one byte behind."""
    sched = Scheduler(CONFIG, forget_ended=True)
    sched.handle(worker_up("w1", slots=4), 0.0)

    def cycle(n: int, t: float) -> None:
        for _ in range(n):
            out = sched.handle(Submit(manifest=manifest(name="x")), t)
            for s in starts(out):
                sched.handle(TaskExited(run=s.run, worker_id=s.worker_id, exit_code=0), t)

    cycle(500, 1.0)  # warm: caches, interned shapes
    gc.collect()
    objects = len(gc.get_objects())
    cycle(5_000, 2.0)
    gc.collect()
    grown = len(gc.get_objects()) - objects
    assert sched.job_ids() == []
    assert len(sched.job_states()) == 5_500
    assert grown < 50, f"{grown} objects more after 5,000 ended jobs"
    held = Scheduler(CONFIG)  # the same without compaction keeps every job
    held.handle(worker_up("w1", slots=4), 0.0)
    for _ in range(100):
        for s in starts(held.handle(Submit(manifest=manifest(name="x")), 1.0)):
            held.handle(TaskExited(run=s.run, worker_id=s.worker_id, exit_code=0), 1.0)
    assert len(held.job_ids()) == 100
