"""Scheduler config loading, lease ids, and refusals of bad worker registrations."""

from __future__ import annotations

import re

import pytest
from sched_harness import Harness, worker_up

from rbs.model import JobState
from rbs.scheduler.config import QueueConfig, SchedulerConfig, load_scheduler_config
from rbs.scheduler.events import RunRef, TaskRef
from rbs.scheduler.instructions import Rejected
from rbs.wire.specs import SpecError


def test_config_from_toml_tables() -> None:
    cfg = load_scheduler_config(
        {
            "queues": [
                {"name": "gpu", "priority_weight": 100, "default_time": "1h", "max_time": "1d"}
            ],
            "heartbeat_timeout": 12,
            "age_max": 10,
        }
    )
    assert cfg.queue_names == ("batch", "gpu")  # batch always exists
    gpu = cfg.queue("gpu")
    assert gpu == QueueConfig(
        name="gpu", priority_weight=100, default_time_limit=3600, max_time_limit=86400
    )
    assert cfg.heartbeat_timeout == 12.0 and cfg.age_max == 10


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"queues": [{"priority_weight": 1}]}, "needs a name"),
        ({"queues": [{"name": "q", "colour": "red"}]}, "unknown key"),
        ({"queues": [{"name": "q", "max_time": "forever"}]}, "queues\\[0\\].max_time 'forever'"),
        ({"age_max": -1}, "age_max '?-1'?: must be at least 0"),
    ],
)
def test_bad_config_names_the_key(table: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        load_scheduler_config(table)


def test_config_refuses_contradictions() -> None:
    with pytest.raises(ValueError, match="repeat"):
        SchedulerConfig(queues=(QueueConfig(name="a"), QueueConfig(name="a")))
    with pytest.raises(ValueError, match="above its max"):
        QueueConfig(name="a", default_time_limit=10, max_time_limit=5)


def test_lease_ids_round_trip() -> None:
    for ref in (RunRef(job_id=12), RunRef(job_id=3, index=7, attempt=2, rank=1)):
        assert RunRef.parse_lease(ref.lease_id) == ref
    assert RunRef(job_id=3, index=7, attempt=2, rank=1).lease_id == "3_7.2.1"
    with pytest.raises(SpecError, match=re.escape("JOB[_INDEX].ATTEMPT.RANK")):
        RunRef.parse_lease("3.x")
    assert str(TaskRef.parse("5_2")) == "5_2"


def test_worker_shrinking_under_its_jobs_is_rejected_and_changes_nothing() -> None:
    h = Harness()
    h.up("w", cpus=4)
    jid = h.submit(res=(3, 1, 0))
    out = h.send(worker_up("w", cpus=2, running=(RunRef(job_id=jid),)))
    assert [type(i) for i in out] == [Rejected]
    assert "drain it" in out[0].message  # type: ignore[union-attr]
    assert h.state(jid) is JobState.RUNNING
    # Re-registering with the same size while still running the job keeps it.
    out = h.send(worker_up("w", cpus=4, running=(RunRef(job_id=jid),)))
    assert h.state(jid) is JobState.RUNNING and h.sched.job(jid).attempts == 1


def test_worker_validation() -> None:
    with pytest.raises(ValueError, match="lists a GPU id twice"):
        worker_up("w", gpus=0).__class__(
            worker_id="w", hostname="h", cpu_millis=1, memory_bytes=1, job_slots=1, gpus=("0", "0")
        )
