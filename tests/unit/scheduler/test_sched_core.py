"""The scheduler core's semantics, flag by flag, asserted on instruction lists."""

from __future__ import annotations

from sched_harness import GIB, Harness, env, kills, manifest, saved_states, starts

from rbs.model import JobState, KillReason
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.events import (
    Requeue,
    RunRef,
    Submit,
    TaskExited,
    TaskRef,
    TaskStarted,
    WorkerUnreachable,
)
from rbs.scheduler.instructions import Accepted, SaveJob, SaveTask, Start


def test_submit_starts_at_once_with_the_job_environment() -> None:
    h = Harness()
    h.up("w1", cpus=4, mem_gb=16)
    out = h.send(
        Submit(manifest=manifest(name="hello", env=(("FOO", "bar"),), res=(1, 2, 0))), at=5.0
    )
    # Saves come first so the driver journals before it acts.
    kinds = [type(i) for i in out]
    assert kinds == [SaveJob, SaveTask, Accepted, Start]
    (start,) = starts(out)
    assert start.worker_id == "w1"
    assert start.run == RunRef(job_id=1, index=None, attempt=1, rank=0)
    assert start.lease_id == "1.1.0"
    e = env(start)
    assert e["RBS_JOB_ID"] == "1" and e["RBS_ATTEMPT"] == "1" and e["FOO"] == "bar"
    assert e["CUDA_VISIBLE_DEVICES"] == ""  # no GPU asked: none visible
    assert "RBS_ARRAY_INDEX" not in e and "RANK" not in e
    assert start.cpu_millis == 1000 and start.memory_bytes == 2 * GIB
    view = h.sched.job(1)
    assert view.state is JobState.RUNNING and view.start_time == 5.0 and view.workers == ("w1",)
    out = h.exit(1, code=0, peak_memory_bytes=123)
    assert saved_states(out) == {1: JobState.COMPLETED}
    view = h.sched.job(1)
    assert view.exit_code == 0 and view.peak_memory_bytes == 123 and view.end_time == 5.0


def test_unknown_queue_is_refused_with_the_queue_list() -> None:
    h = Harness(SchedulerConfig(queues=(QueueConfig(name="gpu"),)))
    msg = h.reject(manifest(queue="nope"))
    assert "--queue 'nope'" in msg and "batch, gpu" in msg
    assert h.sched.job_ids() == []


def test_time_limit_defaults_and_maximum_come_from_the_queue() -> None:
    cfg = SchedulerConfig(
        queues=(QueueConfig(name="short", default_time_limit=600, max_time_limit=3600),)
    )
    h = Harness(cfg)
    assert "above queue short's limit of 1h" in h.reject(manifest(queue="short", time_limit=7200))
    jid = h.submit(queue="short")
    assert h.sched.job(jid).time_limit == 600


def test_a_request_no_worker_can_ever_satisfy_is_refused_with_the_largest_worker() -> None:
    h = Harness()
    h.up("small", cpus=2, mem_gb=4)
    h.up("big", cpus=16, mem_gb=64, gpus=2)
    msg = h.reject(manifest(res=(32, 1, 0)))
    assert "no worker can ever run this job" in msg
    assert "largest worker is big: cpu 16, memory 64.0 GiB, gpus 2" in msg
    assert "gpus 4" in h.reject(manifest(res=(1, 1, 4)))
    assert "on each of 3 nodes" in h.reject(manifest(res=(1, 1, 1), nodes=3))


def test_unknown_dependency_is_refused() -> None:
    h = Harness()
    assert "--deps afterok:7: unknown job id 7" in h.reject(
        manifest(dependencies=_deps("afterok:7"))
    )


def test_bin_packing_reserves_cpu_memory_and_slots() -> None:
    h = Harness()
    h.up("w1", cpus=4, mem_gb=8, slots=3)
    ids = [h.submit(res=(2, 1, 0)) for _ in range(3)]
    assert [h.state(i) for i in ids] == [JobState.RUNNING, JobState.RUNNING, JobState.PENDING]
    assert h.reason(ids[2]) == "Resources"
    mem = [h.submit(res=(0.5, 7, 0))]  # fits cpu but not memory while the others run
    assert h.state(mem[0]) is JobState.PENDING
    h.exit(ids[0])
    assert h.state(ids[2]) is JobState.RUNNING


def test_gpus_are_pinned_and_never_shared() -> None:
    h = Harness()
    h.up("g", cpus=8, mem_gb=32, gpus=4)
    a = h.submit(res=(1, 1, 2))
    b = h.submit(res=(1, 1, 1))
    c = h.submit(res=(1, 1, 2))
    ga = h.sched.job(a).runs[0].nodes[0].gpus
    gb = h.sched.job(b).runs[0].nodes[0].gpus
    assert ga == ("0", "1") and gb == ("2",)
    assert h.state(c) is JobState.PENDING and h.reason(c) == "Resources"
    out = h.exit(a)
    (start,) = starts(out)
    assert start.run.job_id == c and start.gpus == ("0", "1")
    assert env(start)["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_gpu_jobs_prefer_gpu_workers_and_cpu_jobs_avoid_them() -> None:
    h = Harness()
    h.up("cpu", cpus=8, mem_gb=32)
    h.up("gpu", cpus=8, mem_gb=32, gpus=2)
    cpu_job = h.submit(res=(1, 1, 0))
    gpu_job = h.submit(res=(1, 1, 1))
    assert h.sched.job(cpu_job).workers == ("cpu",)
    assert h.sched.job(gpu_job).workers == ("gpu",)


def test_priority_orders_the_queue_and_queue_weight_adds() -> None:
    cfg = SchedulerConfig(
        queues=(QueueConfig(name="batch"), QueueConfig(name="vip", priority_weight=50))
    )
    h = Harness(cfg)
    h.up("w", cpus=1, mem_gb=4, slots=1)
    blocker = h.submit(res=(1, 1, 0))
    low = h.submit(res=(1, 1, 0), priority=1)
    high = h.submit(res=(1, 1, 0), priority=10)
    vip = h.submit(res=(1, 1, 0), queue="vip")
    view = h.sched.job(vip)
    assert (view.priority.base, view.priority.queue_weight, view.priority.total) == (0, 50, 50)
    order = []
    running = blocker
    for _ in range(3):
        (start,) = starts(h.exit(running))
        running = start.run.job_id
        order.append(running)
    assert order == [vip, high, low]


def test_age_bonus_grows_while_pending_and_is_capped() -> None:
    h = Harness(SchedulerConfig(age_interval=60, age_max=5, heartbeat_timeout=1e9))
    h.up("w", cpus=1, mem_gb=4, slots=1)
    h.submit(res=(1, 1, 0))
    old = h.submit(res=(1, 1, 0), priority=0)
    h.tick(at=130.0)
    assert h.sched.job(old).priority.age_bonus == 2
    newer = h.submit(res=(1, 1, 0), priority=1)
    assert h.sched.job(newer).priority.age_bonus == 0
    h.tick(at=250.0)
    assert h.sched.job(old).priority.total == 4 and h.sched.job(newer).priority.total == 3
    # The old job overtook the newcomer with a higher base priority.
    (start,) = starts(h.exit(1))
    assert start.run.job_id == old
    h.tick(at=10_000.0)
    assert h.sched.job(newer).priority.age_bonus == 5  # capped


def test_time_limit_sends_kill_and_ends_as_timeout() -> None:
    h = Harness()
    h.up("w")
    jid = h.submit(time_limit=60)
    assert kills(h.tick(at=59.0)) == []
    h.send(TaskStarted(run=RunRef(job_id=jid), worker_id="w"), at=10.0)  # limit counts from here
    assert kills(h.tick(at=69.0)) == []
    (kill,) = kills(h.tick(at=70.0))
    assert kill.reason is KillReason.TIMEOUT and kill.worker_id == "w"
    assert h.state(jid) is JobState.RUNNING  # still holds its slot until it is gone
    assert kills(h.tick(at=80.0)) == []  # asked once; escalation is the worker's job
    h.exit(jid, code=143, signal=15)
    assert h.state(jid) is JobState.TIMEOUT


def test_cancel_pending_and_running() -> None:
    h = Harness()
    h.up("w", slots=1)
    running = h.submit()
    pending = h.submit()
    out = h.cancel(str(pending))
    assert saved_states(out)[pending] is JobState.CANCELLED and kills(out) == []
    out = h.cancel(str(running))
    (kill,) = kills(out)
    assert kill.reason is KillReason.CANCEL
    h.exit(running, code=0)  # even a clean exit after a cancel ends CANCELLED
    assert h.state(running) is JobState.CANCELLED
    assert kills(h.cancel(str(running))) == []  # cancelling an ended job is a no-op
    assert h.state(running) is JobState.CANCELLED


def test_cancel_unknown_ids_is_rejected_and_changes_nothing() -> None:
    h = Harness()
    h.up("w")
    jid = h.submit()
    out = h.cancel(str(jid), "99")
    assert [type(i).__name__ for i in out] == ["Rejected"]
    assert "unknown job id 99" in out[0].message  # type: ignore[union-attr]
    assert h.state(jid) is JobState.RUNNING
    out = h.cancel(f"{jid}_3")
    assert "is not an array" in out[0].message  # type: ignore[union-attr]


def test_exit_codes_oom_and_signals() -> None:
    h = Harness()
    h.up("w", slots=4)
    a, b, c = h.submit(), h.submit(), h.submit()
    h.exit(a, code=3)
    h.exit(b, code=137, oom=True, peak_memory_bytes=5 * GIB)
    h.exit(c, code=0, signal=9)
    assert h.state(a) is JobState.FAILED and h.sched.job(a).exit_code == 3
    assert h.state(b) is JobState.OUT_OF_MEMORY and h.sched.job(b).oom
    assert h.state(c) is JobState.FAILED


def test_max_retries_reruns_failures_with_a_new_attempt_but_not_timeouts() -> None:
    h = Harness()
    h.up("w")
    jid = h.submit(max_retries=2)
    (start,) = starts(h.exit(jid, attempt=1, code=1))
    assert start.run.attempt == 2 and env(start)["RBS_ATTEMPT"] == "2"
    (start,) = starts(h.exit(jid, attempt=2, oom=True, code=137))
    assert start.run.attempt == 3
    assert starts(h.exit(jid, attempt=3, code=1)) == []
    assert h.state(jid) is JobState.FAILED and h.sched.job(jid).attempts == 3
    t = h.submit(max_retries=5, time_limit=10)
    h.tick(at=100.0)
    h.exit(t, code=143, signal=15)
    assert h.state(t) is JobState.TIMEOUT and h.sched.job(t).attempts == 1


def test_worker_loss_requeues_with_next_attempt_elsewhere() -> None:
    h = Harness()
    h.up("a", slots=1)
    jid = h.submit()
    assert h.sched.job(jid).workers == ("a",)
    h.up("b", slots=1)
    out = h.down("a")
    (start,) = starts(out)
    assert start.worker_id == "b" and start.run.attempt == 2
    assert env(start)["RBS_ATTEMPT"] == "2"
    # The lost attempt is journaled as NODE_FAIL; the job goes on RUNNING.
    lost = [i.record for i in out if isinstance(i, SaveTask) and i.record.attempt == 1]
    assert lost and lost[0].state is JobState.NODE_FAIL and not lost[0].active
    assert h.state(jid) is JobState.RUNNING


def test_no_requeue_ends_node_fail_on_worker_loss() -> None:
    h = Harness()
    h.up("a")
    jid = h.submit(requeue=False, max_retries=3)
    h.down("a")
    assert h.state(jid) is JobState.NODE_FAIL


def test_heartbeat_loss_is_detected_by_tick() -> None:
    h = Harness(SchedulerConfig(heartbeat_timeout=30))
    h.up("a")
    h.up("b", cpus=1, slots=1)
    jid = h.submit(res=(2, 1, 0))  # only fits on a
    h.beat("a", "b", at=20.0)
    h.tick(at=45.0)
    assert h.state(jid) is JobState.RUNNING
    h.beat("b", at=50.0)
    h.tick(at=51.0)  # a was last heard at 20
    assert h.state(jid) is JobState.PENDING and h.reason(jid) == "ReqNodeNotAvail"
    assert h.sched.job(jid).attempts == 1
    (start,) = starts(h.up("a"))
    assert start.run.attempt == 2


def test_an_unreachable_worker_keeps_its_runs_but_takes_no_new_ones() -> None:
    h = Harness(SchedulerConfig(heartbeat_timeout=30))
    h.up("a", slots=2)
    running = h.submit()
    h.send(WorkerUnreachable(worker_id="a"), at=5.0)
    waiting = h.submit()
    assert starts(h.last) == []
    assert h.state(running) is JobState.RUNNING and h.state(waiting) is JobState.PENDING
    # Back (a heartbeat, or a new stream): new work goes there again, the old run kept.
    (start,) = starts(h.beat("a", at=10.0))
    assert start.run.job_id == waiting and h.state(running) is JobState.RUNNING
    # Unreachable and then silent for the timeout: lost, its runs requeued.
    h.send(WorkerUnreachable(worker_id="a"), at=11.0)
    h.tick(at=45.0)
    assert h.state(running) is JobState.PENDING and h.sched.job(running).attempts == 1


def test_reconnect_keeps_what_runs_kills_orphans_and_requeues_the_missing() -> None:
    h = Harness()
    h.up("w", slots=3)
    kept, missing, done = h.submit(), h.submit(), h.submit()
    h.cancel(str(kept))  # the cancel's Kill was lost with the connection
    out = h.send(
        _up(
            "w",
            running=(RunRef(job_id=kept), RunRef(job_id=42, attempt=1)),
            finished=(TaskExited(run=RunRef(job_id=done), worker_id="w", exit_code=0),),
        )
    )
    assert h.state(done) is JobState.COMPLETED
    orphan = [k for k in kills(out) if k.run.job_id == 42]
    assert orphan and orphan[0].reason is KillReason.ORPHAN
    assert h.sched.job(missing).attempts == 2  # requeued and restarted, never twice at once
    assert h.state(kept) is JobState.RUNNING  # still stopping; it exits as CANCELLED
    h.exit(kept)
    assert h.state(kept) is JobState.CANCELLED


def test_requeue_and_preempt() -> None:
    h = Harness()
    h.up("w")
    a = h.submit()
    b = h.submit(requeue=False)
    out = h.send(Requeue(targets=(TaskRef(job_id=a),)))
    assert [k.reason for k in kills(out)] == [KillReason.REQUEUE]
    (start,) = starts(h.exit(a, code=143, signal=15))
    assert start.run.attempt == 2
    h.send(Requeue(targets=(TaskRef(job_id=b),), preempt=True))
    h.exit(b, code=143, signal=15)
    assert h.state(b) is JobState.PREEMPTED


def test_begin_time_holds_a_job() -> None:
    h = Harness()
    h.up("w")
    jid = h.submit(begin_time=100.0)
    assert h.reason(jid) == "BeginTime"
    assert starts(h.tick(at=99.0)) == []
    (start,) = starts(h.tick(at=100.0))
    assert start.run.job_id == jid


def test_reservation_keeps_a_big_job_from_starving_and_backfill_respects_it() -> None:
    h = Harness()
    h.up("w", cpus=4, mem_gb=16, slots=8)
    first = h.submit(res=(2, 1, 0), time_limit=100)
    big = h.submit(res=(4, 1, 0), priority=10)
    assert h.reason(big) == "Resources"
    # A small job that would end after the big one's reserved start waits...
    late = h.submit(res=(1, 1, 0), time_limit=500)
    assert h.state(late) is JobState.PENDING and h.reason(late) == "Priority"
    # ...but one that ends before then is backfilled.
    quick = h.submit(res=(1, 1, 0), time_limit=50)
    assert h.state(quick) is JobState.RUNNING
    h.exit(first)
    assert h.state(big) is JobState.PENDING  # quick still holds a core
    (start,) = starts(h.exit(quick))
    assert start.run.job_id == big
    assert h.state(late) is JobState.PENDING


def test_queue_view_counts_occupancy() -> None:
    h = Harness(
        SchedulerConfig(queues=(QueueConfig(name="gpu", priority_weight=7, max_time_limit=60),))
    )
    h.up("w", slots=1)
    h.submit()
    h.submit()
    views = {q.name: q for q in h.sched.queues()}
    assert views["batch"].running_jobs == 1 and views["batch"].pending_jobs == 1
    assert views["gpu"].priority_weight == 7 and views["gpu"].max_time_limit == 60


def _up(wid: str, **kw: object):  # type: ignore[no-untyped-def]
    from sched_harness import worker_up

    return worker_up(wid, slots=3, **kw)


def _deps(text: str):  # type: ignore[no-untyped-def]
    from rbs.wire.specs import parse_dependencies

    return parse_dependencies(text)
