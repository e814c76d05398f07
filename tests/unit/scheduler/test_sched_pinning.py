"""--cpu-cores in the scheduler: placed only where the cores are free, never shared,
refused when no worker has them; unpinned jobs are not held back by a pinned one."""

from __future__ import annotations

from sched_harness import Harness, manifest, starts

from rbs.model import JobState


def _worker_of(h: Harness, job: int) -> str | None:
    v = h.sched.job(job)
    return v.workers[0] if v.state is JobState.RUNNING else None


def test_two_pinned_jobs_never_share_a_core() -> None:
    h = Harness()
    h.up("w1", cpus=4)
    a = h.submit(manifest(cpu_cores=(0, 1), res=(1, 1, 0)))
    b = h.submit(manifest(cpu_cores=(1, 2), res=(1, 1, 0)))
    c = h.submit(manifest(cpu_cores=(2, 3), res=(1, 1, 0)))
    assert _worker_of(h, a) == "w1"
    assert h.sched.job(b).state is JobState.PENDING  # core 1 is a's
    assert _worker_of(h, c) == "w1"  # cores 2-3 are free
    h.exit(a, code=0)
    assert h.sched.job(b).state is JobState.PENDING  # core 2 is c's now
    h.exit(c, code=0)
    assert _worker_of(h, b) == "w1"


def test_a_pinned_job_goes_where_its_cores_are_free() -> None:
    h = Harness()
    h.up("w1", cpus=2)
    h.up("w2", cpus=2)
    a = h.submit(manifest(cpu_cores=(1,), res=(1, 1, 0)))
    b = h.submit(manifest(cpu_cores=(1,), res=(1, 1, 0)))
    assert {_worker_of(h, a), _worker_of(h, b)} == {"w1", "w2"}


def test_a_blocked_pinned_job_does_not_hold_back_unpinned_ones() -> None:
    h = Harness()
    h.up("w1", cpus=4)
    h.submit(manifest(cpu_cores=(0,), res=(1, 1, 0)))
    blocked = h.submit(manifest(cpu_cores=(0,), res=(1, 1, 0)))
    out = h.send()
    plain = h.submit(manifest(res=(1, 1, 0)))
    assert h.sched.job(blocked).state is JobState.PENDING
    assert _worker_of(h, plain) == "w1"
    assert out is not None and starts(out) == []


def test_cores_no_worker_has_are_refused_at_submit() -> None:
    h = Harness()
    h.up("w1", cpus=2)
    msg = h.reject(manifest(cpu_cores=(0, 6), res=(1, 1, 0)))
    assert "--cpu-cores 0,6: no worker has these cores (the largest has cores 0-1)" in msg
    assert h.sched.job_ids() == []
