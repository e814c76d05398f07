"""Preemption: who may stop whom, which victims, and what becomes of them."""

from __future__ import annotations

from typing import Any

import pytest
from sched_harness import Harness, kills, manifest, starts

from rbs.model import JobState, KillReason
from rbs.scheduler.config import QueueConfig, SchedulerConfig, load_scheduler_config
from rbs.scheduler.instructions import Note
from rbs.units import SpecError


def config(mode: str = "requeue", **kw: Any) -> SchedulerConfig:
    return SchedulerConfig(
        queues=(
            QueueConfig(name="low", preempt_mode=mode),
            QueueConfig(name="high", priority_weight=100, preempts=("low",)),
        ),
        heartbeat_timeout=1e9,
        **kw,
    )


def preempt_kills(out: list[Any]) -> list[tuple[int, int, str]]:
    return sorted(
        (k.run.job_id, k.run.rank, k.worker_id)
        for k in kills(out)
        if k.reason is KillReason.PREEMPT
    )


def test_a_high_job_preempts_a_preemptible_low_job_which_requeues_and_resumes() -> None:
    h = Harness(config())
    h.up("w", slots=1)
    low = h.submit(queue="low", preemptible=True, max_retries=0, restarts=1)
    assert h.state(low) is JobState.RUNNING
    out = h.send()
    high = h.submit(queue="high")
    out = h.last
    assert preempt_kills(out) == [(low, 0, "w")]
    (note,) = [i for i in out if isinstance(i, Note)]
    assert note.job_id == low and note.attempt == 1
    assert f"preempted for job {high}" in note.text and "goes back to PENDING" in note.text
    (change,) = h.sched.job(low).changes
    assert change.action == f"preempted for job {high}"
    assert h.state(high) is JobState.PENDING  # the victim still holds the worker
    out = h.exit(low, code=143, signal=15)
    assert [(s.run.job_id, s.worker_id) for s in starts(out)] == [(high, "w")]
    view = h.sched.job(low)
    assert view.state is JobState.PENDING and view.attempts == 1
    out = h.exit(high)
    (start,) = starts(out)
    assert (start.run.job_id, start.run.attempt) == (low, 2)
    h.exit(low, attempt=2)
    assert h.state(low) is JobState.COMPLETED  # neither max_retries 0 nor restarts 1 spent


def test_preempt_mode_cancel_ends_the_victim_preempted() -> None:
    h = Harness(config(mode="cancel"))
    h.up("w", slots=1)
    low = h.submit(queue="low", preemptible=True)
    h.submit(queue="high")
    assert "it ends PREEMPTED" in next(i for i in h.last if isinstance(i, Note)).text
    h.exit(low, code=143, signal=15)
    assert (h.state(low), h.reason(low)) == (JobState.PREEMPTED, "preempted")


@pytest.mark.parametrize(
    "victim",
    [
        {"queue": "low"},  # not preemptible
        {"queue": "low", "preemptible": True, "priority": 100},  # same tier
        {"queue": "high", "preemptible": True, "priority": -500},  # high preempts only low
    ],
)
def test_no_preemption_without_a_preemptible_job_of_a_lower_tier_in_a_preempted_queue(
    victim: dict[str, Any],
) -> None:
    cfg = SchedulerConfig(
        queues=(
            QueueConfig(name="low"),
            QueueConfig(name="high", priority_weight=100, preempts=("low", "high")),
        ),
        heartbeat_timeout=1e9,
    )
    h = Harness(cfg)
    h.up("w", slots=1)
    h.submit(**victim)
    high = h.submit(queue="high", priority=-500 if victim["queue"] == "high" else 0)
    assert preempt_kills(h.last) == []
    assert (h.state(high), h.reason(high)) == (JobState.PENDING, "Resources")


def test_a_low_job_never_preempts_however_long_it_waited() -> None:
    h = Harness(config(age_interval=1.0, age_max=10_000))
    h.up("w", slots=1)
    h.submit(queue="high", preemptible=False)
    low = h.submit(queue="low", preemptible=True)
    h.tick(at=5000.0)  # an age bonus of thousands, still no tier
    assert preempt_kills(h.last) == [] and h.state(low) is JobState.PENDING


def test_preemptible_on_a_queue_never_preempted_is_refused_naming_the_flag() -> None:
    h = Harness(config())
    h.up("w")
    msg = h.reject(manifest(queue="high", preemptible=True))
    assert msg.startswith("--preemptible: queue high is never preempted")
    assert "low" in msg
    plain = Harness()
    plain.up("w")
    assert "--preemptible" in plain.reject(manifest(preemptible=True))


def test_a_gang_is_preempted_whole() -> None:
    h = Harness(config())
    for w in ("a", "b"):
        h.up(w, slots=1)
    gang = h.submit(queue="low", preemptible=True, nodes=2)
    h.submit(queue="high")
    assert [(j, r) for j, r, _ in preempt_kills(h.last)] == [(gang, 0), (gang, 1)]


def test_the_fewest_victims_then_the_lowest_tier() -> None:
    h = Harness(config())
    h.up("a", cpus=4, slots=4)
    h.up("b", cpus=4, slots=4)
    small = [h.submit(queue="low", preemptible=True, res=(2, 1, 0)) for _ in range(2)]
    big = h.submit(queue="low", preemptible=True, res=(4, 1, 0), priority=5)
    assert {w for j in small for w in h.sched.job(j).workers} != set(h.sched.job(big).workers)
    h.submit(queue="high", res=(4, 1, 0))
    assert [j for j, _, _ in preempt_kills(h.last)] == [big]  # one victim beats two
    h2 = Harness(config())
    h2.up("a", cpus=2, slots=1)
    h2.up("b", cpus=2, slots=1)
    pricier = h2.submit(queue="low", preemptible=True, res=(2, 1, 0), priority=9)
    cheaper = h2.submit(queue="low", preemptible=True, res=(2, 1, 0), priority=1)
    assert h2.state(pricier) is h2.state(cheaper) is JobState.RUNNING
    h2.submit(queue="high", res=(2, 1, 0))
    assert [j for j, _, _ in preempt_kills(h2.last)] == [cheaper]


def test_runs_already_stopping_count_before_new_victims() -> None:
    h = Harness(config())
    h.up("w", slots=1)
    low = h.submit(queue="low", preemptible=True)
    first = h.submit(queue="high")
    assert preempt_kills(h.last) == [(low, 0, "w")]
    h.tick(at=1.0)
    assert preempt_kills(h.last) == []  # its room is on the way
    assert h.state(first) is JobState.PENDING


def test_queue_config_reads_preempts_and_preempt_mode_and_refuses_typos() -> None:
    cfg = load_scheduler_config(
        {
            "queues": [
                {"name": "low", "preempt_mode": "cancel"},
                {"name": "high", "priority_weight": 10, "preempts": ["low"]},
            ]
        }
    )
    low, high = cfg.queue("low"), cfg.queue("high")
    assert low is not None and high is not None
    assert (low.preempt_mode, high.preempts, high.preempt_mode) == ("cancel", ("low",), "requeue")
    with pytest.raises(SpecError, match="preempt_mode"):
        load_scheduler_config({"queues": [{"name": "low", "preempt_mode": "kill"}]})
    with pytest.raises(SpecError, match="preempts"):
        load_scheduler_config({"queues": [{"name": "low", "preempts": "high"}]})
    with pytest.raises(ValueError, match="preempts unknown queue 'nope'"):
        load_scheduler_config({"queues": [{"name": "low", "preempts": ["nope"]}]})
