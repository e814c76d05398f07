"""The workers a preemption frees are held for its preemptor; gangs and pinned jobs preempt."""

from __future__ import annotations

from typing import Any

from sched_harness import Harness, kills, starts

from rbs.model import JobState, KillReason
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.preempt_holds import HOLD_S


def config(mode: str = "requeue") -> SchedulerConfig:
    return SchedulerConfig(
        queues=(
            QueueConfig(name="low", preempt_mode=mode),
            QueueConfig(name="high", priority_weight=100, preempts=("low",)),
        ),
        heartbeat_timeout=1e9,
    )


def preempted(out: list[Any]) -> list[tuple[int, int, str]]:
    return sorted(
        (k.run.job_id, k.run.rank, k.worker_id)
        for k in kills(out)
        if k.reason is KillReason.PREEMPT
    )


def started(out: list[Any]) -> list[tuple[int, str]]:
    return [(s.run.job_id, s.worker_id) for s in starts(out)]


def test_the_room_a_victim_frees_waits_for_the_preemptor_not_a_smaller_job() -> None:
    h = Harness(config())
    h.up("w", cpus=4, slots=4)
    a = h.submit(queue="low", preemptible=True, res=(2, 1, 0))
    b = h.submit(queue="low", preemptible=True, res=(2, 1, 0))
    high = h.submit(queue="high", res=(4, 1, 0))
    assert [j for j, _, _ in preempted(h.last)] == sorted([a, b])
    small = h.submit(queue="low", res=(2, 1, 0), time_limit=60)  # would fit once `a` exits
    out = h.exit(a, code=143, signal=15)
    assert started(out) == []  # neither the small job nor a backfill takes the freed half
    assert (h.state(small), h.reason(small)) == (JobState.PENDING, "Priority")
    out = h.exit(b, code=143, signal=15)
    assert started(out) == [(high, "w")]


def test_a_preemptor_placed_after_others_in_the_walk_still_gets_its_workers() -> None:
    cfg = SchedulerConfig(
        queues=(
            QueueConfig(name="low"),
            QueueConfig(name="high", priority_weight=100, preempts=("low",)),
        ),
        heartbeat_timeout=1e9,
        age_interval=1.0,
        age_max=100_000,
    )
    h = Harness(cfg)
    h.up("w", cpus=2, slots=2)
    victim = h.submit(queue="low", preemptible=True, res=(2, 1, 0))
    small = h.submit(queue="low", res=(1, 1, 0))
    h.tick(at=5000.0)  # the small job ages far above any newcomer: the walk meets it first
    high = h.submit(queue="high", res=(2, 1, 0))
    assert preempted(h.last) == [(victim, 0, "w")]
    assert h.sched.job(small).priority.total > h.sched.job(high).priority.total
    out = h.exit(victim, code=143, signal=15)
    assert started(out) == [(high, "w")]
    assert h.state(small) is JobState.PENDING


def test_a_cancelled_preemptor_holds_nothing_and_its_requeued_victim_runs_again() -> None:
    h = Harness(config())
    h.up("w", cpus=2, slots=2)
    victim = h.submit(queue="low", preemptible=True, res=(2, 1, 0))
    high = h.submit(queue="high", res=(2, 1, 0))
    assert preempted(h.last) == [(victim, 0, "w")]
    h.cancel(str(high))
    out = h.exit(victim, code=143, signal=15)
    assert [(s.run.job_id, s.run.attempt) for s in starts(out)] == [(victim, 2)]


def test_a_pinned_preemptor_keeps_its_hold_until_the_bound_then_lets_it_go() -> None:
    # A pinned job holds no backfill reservation: the preemption hold is what keeps the
    # room its victims free for it.
    h = Harness(config(mode="cancel"))
    h.up("w", cpus=2, slots=3)
    x = h.submit(queue="low", preemptible=True, res=(1, 1, 0), cpu_cores=(0,))
    y = h.submit(queue="low", preemptible=True, res=(1, 1, 0))
    pinned = h.submit(queue="high", res=(2, 1, 0), cpu_cores=(0, 1))
    assert [j for j, _, _ in preempted(h.last)] == sorted([x, y])
    low = h.submit(queue="low", res=(1, 1, 0))
    h.exit(x, code=143, signal=15)
    h.tick(at=HOLD_S - 1)
    assert h.state(low) is JobState.PENDING  # held for the pinned job; `y` has not exited
    out = h.tick(at=HOLD_S + 1)
    assert started(out) == [(low, "w")]  # the bound passed: the room opens again
    assert h.state(pinned) is JobState.PENDING


def test_a_gang_preempts_one_victim_on_each_of_its_workers() -> None:
    h = Harness(config())
    h.up("a", cpus=2, slots=1)
    h.up("b", cpus=2, slots=1)
    x = h.submit(queue="low", preemptible=True, res=(2, 1, 0))
    y = h.submit(queue="low", preemptible=True, res=(2, 1, 0))
    gang = h.submit(queue="high", res=(2, 1, 0), nodes=2)
    assert [j for j, _, _ in preempted(h.last)] == sorted([x, y])
    low = h.submit(queue="low", res=(2, 1, 0))
    h.exit(x, code=143, signal=15)
    assert h.state(low) is JobState.PENDING  # the first freed worker waits for the gang
    out = h.exit(y, code=143, signal=15)
    assert sorted(started(out)) == [(gang, "a"), (gang, "b")]


def test_a_job_pinned_to_cores_preempts_the_pinned_run_holding_them() -> None:
    h = Harness(config())
    h.up("w", cpus=4, slots=4)
    holder = h.submit(queue="low", preemptible=True, res=(1, 1, 0), cpu_cores=(0,))
    other = h.submit(queue="low", preemptible=True, res=(1, 1, 0), cpu_cores=(1,))
    pinned = h.submit(queue="high", res=(1, 1, 0), cpu_cores=(0,))
    # Only the run on core 0 is stopped, though the worker has cpus free.
    assert preempted(h.last) == [(holder, 0, "w")]
    out = h.exit(holder, code=143, signal=15)
    assert started(out) == [(pinned, "w")]
    assert h.state(other) is JobState.RUNNING


def test_a_pinned_job_does_not_preempt_when_its_core_is_held_by_a_run_it_may_not_stop() -> None:
    h = Harness(config())
    h.up("w", cpus=4, slots=4)
    h.submit(queue="low", res=(1, 1, 0), cpu_cores=(0,))  # not preemptible
    h.submit(queue="low", preemptible=True, res=(3, 1, 0))
    pinned = h.submit(queue="high", res=(1, 1, 0), cpu_cores=(0,))
    assert preempted(h.last) == []
    assert h.state(pinned) is JobState.PENDING
