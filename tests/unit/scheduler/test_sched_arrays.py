"""Job arrays: lazy task pools, %N throttles, per-task env, task addressing and cancels."""

from __future__ import annotations

from sched_harness import Harness, env, manifest, starts

from rbs.model import JobState
from rbs.scheduler.arrays import TaskPool
from rbs.scheduler.instructions import SaveJob, SaveTask
from rbs.wire.specs import parse_array


def test_pool_walks_ranges_lazily_and_retries_first() -> None:
    pool = TaskPool(parse_array("0-4:2,10,20-21"))
    assert pool.total == 6 and pool.pending == 6
    assert [pool.pop()[0] for _ in range(2)] == [0, 2]
    pool.push_retry(0, 2, 1)
    assert pool.pop() == (0, 2, 1, 0)
    assert pool.cancel_index(20) and not pool.cancel_index(2) and not pool.cancel_index(3)
    assert pool.pending == 3  # 4, 10 and 21; 20 was cancelled before it was reached
    assert [pool.pop() for _ in range(3)] == [(4, 1, 0, 0), (10, 1, 0, 0), (21, 1, 0, 0)]
    assert pool.pending == 0
    assert pool.counts[JobState.CANCELLED] == 1


def test_pool_record_round_trip() -> None:
    spec = parse_array("0-99%5")
    pool = TaskPool(spec)
    for _ in range(10):
        pool.pop()
    pool.push_retry(3, 2, 0)
    pool.cancel_index(50)
    pool.finish(JobState.COMPLETED, 4)
    again = TaskPool.from_record(spec, pool.to_record())
    assert again.to_record() == pool.to_record()
    assert again.pending == pool.pending == 90 - 1 + 1
    assert again.pop() == (3, 2, 0, 0) and again.pop() == (10, 1, 0, 0)


def test_array_tasks_get_their_index_and_the_throttle_holds() -> None:
    h = Harness()
    h.up("w", cpus=64, mem_gb=256, slots=64)
    jid = h.submit(array=parse_array("0-9%3"))
    running = h.sched.job(jid).runs
    assert sorted(r.index for r in running) == [0, 1, 2]  # type: ignore[type-var]
    assert h.reason(jid) == "JobArrayTaskLimit"
    (start,) = starts(h.exit(jid, index=1))
    e = env(start)
    assert (
        e["RBS_ARRAY_INDEX"] == "3"
        and e["RBS_JOB_ID"] == str(jid)
        and e["RBS_TASK_ID"] == f"{jid}_3"
    )
    for _ in range(20):
        runs = h.sched.job(jid).runs
        if not runs:
            break
        assert len(runs) <= 3
        h.exit(jid, index=runs[0].index)
    view = h.sched.job(jid)
    assert view.state is JobState.COMPLETED
    assert view.array is not None and view.array.finished == (("COMPLETED", 10),)


def test_cancel_one_pending_and_one_running_task() -> None:
    h = Harness()
    h.up("w", slots=2)
    jid = h.submit(array=parse_array("0-4"))
    h.cancel(f"{jid}_4", f"{jid}_0")
    h.exit(jid, index=0, code=0)  # it was killed; a clean exit still counts as cancelled
    while h.sched.job(jid).runs:
        h.exit(jid, index=h.sched.job(jid).runs[0].index)
    view = h.sched.job(jid)
    assert view.array is not None
    assert dict(view.array.finished) == {"CANCELLED": 2, "COMPLETED": 3}
    assert view.state is JobState.CANCELLED
    out = h.cancel(f"{jid}_9")
    assert "has no array task 9 (its array is 0-4)" in out[0].message  # type: ignore[union-attr]


def test_array_aggregate_state_reports_failures_and_highest_exit_code() -> None:
    h = Harness()
    h.up("w", slots=4)
    jid = h.submit(array=parse_array("1,2,3"))
    h.exit(jid, index=1, code=0)
    h.exit(jid, index=2, code=2)
    h.exit(jid, index=3, code=1)
    view = h.sched.job(jid)
    assert view.state is JobState.FAILED and view.exit_code == 2


def test_a_100k_array_costs_only_what_runs() -> None:
    h = Harness()
    h.up("w", cpus=2, mem_gb=4, slots=2)
    out = h.send(*(), at=0.0)
    assert out == []
    from rbs.scheduler.events import Submit

    out = h.send(Submit(manifest=manifest(array=parse_array("0-99999"), res=(1, 1, 0))))
    # One job row and one row per started task: nothing per pending task.
    assert sum(isinstance(i, SaveJob) for i in out) == 1
    assert sum(isinstance(i, SaveTask) for i in out) == 2
    view = h.sched.job(1)
    assert view.array is not None and view.array.pending == 99_998 and view.array.running == 2
    out = h.exit(1, index=0)
    assert len(starts(out)) == 1 and len(out) < 10
    h.cancel("1")
    view = h.sched.job(1)
    assert view.array is not None and dict(view.array.finished)["CANCELLED"] == 99_997


def test_task_view_addresses_one_task() -> None:
    h = Harness()
    h.up("w", slots=1)
    jid = h.submit(array=parse_array("0-3"), max_retries=1)
    assert h.sched.task(jid, 0).state is JobState.RUNNING
    pending = h.sched.task(jid, 2)
    assert pending.state is JobState.PENDING and pending.attempt == 1
    h.exit(jid, index=0, code=1)  # retried, and retries go before fresh tasks
    again = h.sched.task(jid, 0)
    assert again.state is JobState.RUNNING and again.attempt == 2 and again.run is not None
    h.exit(jid, index=0, attempt=2)
    assert h.sched.task(jid, 0).state is None  # finished: the journal has the details
    assert h.sched.task(jid, 1).state is JobState.RUNNING
    import pytest

    from rbs.scheduler.state import SchedulerError

    with pytest.raises(SchedulerError, match="no array task 9"):
        h.sched.task(jid, 9)
