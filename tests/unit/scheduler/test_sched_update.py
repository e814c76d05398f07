"""`rbs job update` in the core: a pending job's begin time, priority, time limit and queue."""

from __future__ import annotations

import dataclasses
from typing import Any

from sched_harness import Harness, manifest, starts

from rbs.model import JobState
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.events import Update
from rbs.scheduler.instructions import Accepted, Rejected

QUEUES = (
    QueueConfig(name="batch", default_time_limit=3600, max_time_limit=7200),
    QueueConfig(name="urgent", priority_weight=100),
)


def harness() -> Harness:
    return Harness(SchedulerConfig(heartbeat_timeout=1e9, queues=QUEUES))


def update(h: Harness, job_id: int, admin: bool = False, **fields: Any) -> str | None:
    """None when accepted, else the refusal's message."""
    m = dataclasses.replace(h.sched.job(job_id).manifest, **fields)
    out = h.send(Update(job_id=job_id, manifest=m, by="alice", admin=admin))
    if any(isinstance(i, Accepted) for i in out):
        return None
    (rej,) = [i for i in out if isinstance(i, Rejected)]
    return rej.message


def test_a_later_begin_time_holds_and_an_earlier_one_releases() -> None:
    h = harness()
    h.up("w")
    jid = h.submit(begin_time=100.0)
    assert update(h, jid, begin_time=300.0) is None
    assert starts(h.tick(at=150.0)) == []  # the old time's heap entry no longer fires
    assert h.reason(jid) == "BeginTime"
    assert update(h, jid, begin_time=None) is None
    (start,) = starts(h.last)
    assert start.run.job_id == jid
    assert h.sched.job(jid).changes[-1].action == "update --begin"


def test_holding_a_ready_job_with_a_begin_time() -> None:
    h = harness()
    jid = h.submit()  # no worker yet: it waits ready
    assert update(h, jid, begin_time=500.0) is None
    assert h.reason(jid) == "BeginTime"
    h.up("w")
    assert h.state(jid) is JobState.PENDING
    (start,) = starts(h.tick(at=500.0))
    assert start.run.job_id == jid


def test_priority_reorders_the_queue_and_raising_it_takes_admin() -> None:
    h = harness()
    h.up("w", cpus=1, slots=1)
    running = h.submit(res=(1, 1, 0))
    first = h.submit(res=(1, 1, 0), priority=5)
    second = h.submit(res=(1, 1, 0), priority=1)
    message = update(h, second, priority=9)
    assert message is not None and "takes the admin role" in message
    assert update(h, first, priority=0) is None  # lowering is the owner's right
    assert update(h, second, priority=9, admin=True) is None
    h.exit(running)
    assert h.state(second) is JobState.RUNNING and h.state(first) is JobState.PENDING


def test_time_limits_and_queues() -> None:
    h = harness()
    jid = h.submit(time_limit=600)
    assert update(h, jid, time_limit=3600) is None  # up to the queue's default
    message = update(h, jid, time_limit=5400)
    assert message is not None and "takes the admin role" in message
    assert update(h, jid, time_limit=5400, admin=True) is None
    message = update(h, jid, time_limit=9000, admin=True)
    assert message is not None and "above queue batch's limit of 2h" in message
    assert update(h, jid, queue="urgent") is None
    assert h.sched.job(jid).queue == "urgent"
    message = update(h, jid, queue="nope")
    assert message is not None and "--queue 'nope': unknown queue" in message


def test_only_pending_jobs_and_only_the_four_fields() -> None:
    h = harness()
    h.up("w")
    jid = h.submit()
    assert h.state(jid) is JobState.RUNNING
    message = update(h, jid, priority=-1)
    assert message is not None and "only a pending job" in message
    other = h.submit(begin_time=1e9)
    message = update(h, other, command=("false",))
    assert message is not None and "not command" in message
    assert h.sched.job(other).manifest.command == manifest().command
