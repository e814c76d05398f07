"""Container jobs in the job core: only workers with a runtime run them; none: refused."""

from __future__ import annotations

from sched_harness import Harness, manifest, starts

from rbs.model import JobState

IMG = "localhost/tools:1"


def test_a_container_job_is_refused_when_no_worker_has_a_runtime() -> None:
    h = Harness()
    h.up("plain", cpus=8, mem_gb=32)
    msg = h.reject(manifest(container=IMG))
    assert f"--container {IMG}: no worker can run containers" in msg
    assert "podman and runc" in msg
    assert h.sched.job_ids() == []
    h.submit()  # a job without an image is fine there


def test_a_container_job_goes_only_to_a_worker_with_a_runtime() -> None:
    h = Harness()
    h.up("plain", cpus=2, mem_gb=4)  # the best fit for a small job
    h.up("podman", cpus=16, mem_gb=64, container_runtimes=("podman",))
    jid = h.submit(manifest(container=IMG, res=(1, 1, 0)))
    (start,) = starts(h.last)
    assert start.worker_id == "podman"
    assert h.sched.job(jid).workers == ("podman",)
    other = h.submit(manifest(res=(1, 1, 0)))
    assert h.sched.job(other).workers == ("plain",)


def test_a_container_job_waiting_for_a_runtime_does_not_hold_back_plain_jobs() -> None:
    h = Harness()
    h.up("podman", cpus=1, mem_gb=4, slots=1, container_runtimes=("podman",))
    h.up("plain", cpus=4, mem_gb=16)
    first = h.submit(manifest(container=IMG, res=(1, 1, 0)))  # fills the podman worker
    waiting = h.submit(manifest(container=IMG, res=(1, 1, 0), priority=10))
    plain = h.submit(manifest(res=(1, 1, 0)))  # same shape but no image, lower priority
    assert h.sched.job(first).state is JobState.RUNNING
    assert h.sched.job(waiting).state is JobState.PENDING
    assert h.sched.job(plain).state is JobState.RUNNING
    assert h.sched.job(plain).workers == ("plain",)
    h.exit(first)
    assert h.sched.job(waiting).workers == ("podman",)
