"""What a scheduling decision costs, counted (never timed): it must not grow with the cluster.

The core counts its operations (`Scheduler.work`): workers examined by placement and
reservations, release-calendar entries walked, jobs and task shapes a pass reached.
Each test builds the same situation at two sizes, two orders of magnitude apart, and
checks that the work per decision grows far less than the size (linear growth would
be a factor of 100). The structures themselves are checked against a recomputation
from scratch after every step of the validating tests (invariants.check_indexes).
"""

from __future__ import annotations

from sched_harness import GIB, Harness, manifest, starts, worker_up

from rbs.model import JobState
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Event, Submit, TaskExited
from rbs.scheduler.instructions import Instruction, Start

LINEAR = 100  # the size ratio between the two runs of each test


def _full_cluster(
    workers: int, cpus: int, slots: int, running: list[Event], pending: list[Event]
) -> tuple[Scheduler, list[Start]]:
    sched = Scheduler(SchedulerConfig(heartbeat_timeout=1e9))
    ups = [worker_up(f"w{i:05d}", cpus=cpus, mem_gb=64, slots=slots) for i in range(workers)]
    sched.handle_many(ups, 0.0)
    out = sched.handle_many(running, 1.0)
    started = [i for i in out if isinstance(i, Start)]
    assert len(started) == len(running), "the running jobs should fill the cluster"
    sched.handle_many(pending, 2.0)
    return sched, started


def _work_per_exit(
    sched: Scheduler, running: list[Start], exits: int, expect_start: bool = True
) -> float:
    """Mean work of the step that ends a run (and starts the next job, if one fits)."""
    before = sched.work.total()
    now = 3.0
    for start in running[:exits]:
        out: list[Instruction] = sched.handle(
            TaskExited(run=start.run, worker_id=start.worker_id, exit_code=0), now
        )
        if expect_start:
            assert starts(out), "each exit should start the next job"
        now += 0.001
    return (sched.work.total() - before) / exits


def _workers_case(workers: int) -> float:
    # One slot per worker, every worker busy with a job of its own time limit, as many
    # jobs again pending: each exit must find the one free worker, and the blocked job
    # after it gets a reservation from the release calendar.
    running: list[Event] = [
        Submit(manifest=manifest(res=(1, 1, 0), time_limit=1000 + i)) for i in range(workers)
    ]
    pending: list[Event] = [
        Submit(manifest=manifest(res=(1, 1, 0), time_limit=5000)) for _ in range(workers)
    ]
    sched, started = _full_cluster(workers, cpus=1, slots=1, running=running, pending=pending)
    return _work_per_exit(sched, started, exits=50)


def test_work_per_decision_does_not_grow_with_workers_or_running_tasks() -> None:
    small, large = _workers_case(100), _workers_case(10_000)
    assert small > 0
    # Linear growth would be 100x; the indexes keep it to a bisect and a few entries.
    assert large <= 3 * small, (small, large)


def _shapes_case(shapes: int, blocked: bool) -> float:
    # Two-cpu workers full of one-cpu jobs, and `shapes` pending jobs of distinct memory
    # sizes (so distinct task shapes). Either they ask for one cpu, and each exit starts
    # the first of them, or (`blocked`) two, which the one cpu an exit frees never
    # holds: every pass then meets blocked shapes only, and stops after `pass_depth`.
    workers = 200
    running: list[Event] = [
        Submit(manifest=manifest(res=(1, 1, 0), time_limit=1000 + i)) for i in range(2 * workers)
    ]
    cpus = 2 if blocked else 1
    pending: list[Event] = [
        Submit(manifest=manifest(res=(cpus, 1 + i / 1024, 0), time_limit=100_000, name=f"j{i}"))
        for i in range(shapes)
    ]
    sched, started = _full_cluster(workers, cpus=2, slots=2, running=running, pending=pending)
    return _work_per_exit(sched, started, exits=50, expect_start=not blocked)


def test_work_per_decision_does_not_grow_with_pending_shapes() -> None:
    small, large = _shapes_case(100, blocked=False), _shapes_case(10_000, blocked=False)
    assert small > 0
    assert large <= 3 * small, (small, large)


def test_work_of_a_pass_over_blocked_shapes_is_bounded_by_pass_depth() -> None:
    # With few distinct shapes the pass sees that every one is blocked (each at least
    # as big as one that failed) and stops at once; with more than it checks that way,
    # it stops after `pass_depth` failed shapes. Either way the work is bounded by a
    # constant, not by the number of pending shapes.
    few = _shapes_case(100, blocked=True)
    small, large = _shapes_case(500, blocked=True), _shapes_case(10_000, blocked=True)
    assert 0 < few <= small
    assert large <= 1.5 * small, (small, large)
    assert large <= 3 * SchedulerConfig().pass_depth, large


def test_a_pass_stops_after_pass_depth_failed_shapes_and_views_say_priority() -> None:
    h = Harness(SchedulerConfig(heartbeat_timeout=1e9, pass_depth=3))
    h.up("w", cpus=2, mem_gb=16, slots=4)
    blocker = h.submit(res=(2, 1, 0))
    big = [h.submit(res=(2, 1 + i, 0), priority=5) for i in range(5)]
    small = h.submit(res=(1, 1, 0))
    # The cluster is full: nothing starts, and nothing past the depth is examined.
    assert h.state(small) is JobState.PENDING
    h.exit(blocker)
    # The freed worker takes the first big job; the small job is reached only once the
    # big ones ahead of it have started or left.
    assert h.state(big[0]) is JobState.RUNNING
    assert h.reason(small) == "Priority"
    for jid in big[1:]:
        h.cancel(str(jid))
    h.exit(big[0])
    assert h.state(small) is JobState.RUNNING


def test_capped_age_orders_old_jobs_by_base_priority_then_age() -> None:
    # age_max 3: after three steps a job's bonus stops growing, so a newer job of higher
    # base priority catches up with (and then passes) an old capped one.
    h = Harness(SchedulerConfig(heartbeat_timeout=1e9, age_interval=10, age_max=3))
    h.up("w", cpus=1, mem_gb=4, slots=1)
    blocker = h.submit(res=(1, 1, 0))
    old = h.submit(res=(1, 1, 0), priority=0)
    h.tick(at=100.0)  # old is capped: 0 + 3
    newer = h.submit(res=(1, 1, 0), priority=2)  # 2 + 0, grows to 2 + 3
    h.tick(at=120.0)  # newer: 2 + 2 = 4 > old's 3
    assert h.sched.job(old).priority.total == 3 and h.sched.job(newer).priority.total == 4
    (start,) = starts(h.exit(blocker))
    assert start.run.job_id == newer
    assert h.state(old) is JobState.PENDING


def test_memory_sizes_are_honoured_by_the_free_index() -> None:
    # Two workers with free cpu: the best fit by cpu lacks the memory, so placement
    # must walk past it to the one that has both.
    h = Harness()
    h.up("small-mem", cpus=4, mem_gb=2, slots=4)
    h.up("big-mem", cpus=8, mem_gb=64, slots=4)
    jid = h.submit(res=(1, 8, 0))
    assert h.sched.job(jid).workers == ("big-mem",)
    tight = h.submit(res=(1, 1, 0))
    assert h.sched.job(tight).workers == ("small-mem",)
    assert GIB  # the harness unit


def test_a_whole_node_reservation_past_the_walk_budget_still_holds() -> None:
    # Two 100-slot workers full of one-cpu jobs (best fit fills w0 first: limits 1000 to
    # 1099 there, 1100 to 1199 on w1). A job asking for a whole worker would walk 99
    # releases, past the budget, so its reservation comes from the drain index: w0, all
    # free by 1100 at the latest.
    h = Harness()
    h.up("w0", cpus=100, mem_gb=200, slots=100)
    h.up("w1", cpus=100, mem_gb=200, slots=100)
    small = [h.submit(res=(1, 1, 0), time_limit=1000 + i) for i in range(200)]
    assert all(h.state(j) is JobState.RUNNING for j in small)
    big = h.submit(res=(100, 100, 0), priority=10, time_limit=100)
    assert h.reason(big) == "Resources"
    h.now = 2.0
    h.exit(small[0])  # frees a cpu on w0, the worker the big job waits for
    late = h.submit(res=(1, 1, 0), time_limit=5000)  # would end after w0 drains
    assert h.state(late) is JobState.PENDING and h.reason(late) == "Priority"
    quick = h.submit(res=(1, 1, 0), time_limit=50)  # ends long before: backfilled
    assert h.state(quick) is JobState.RUNNING
    assert h.sched.work.allocations_visited > 0


def test_ageing_to_the_cap_keeps_the_queue_in_priority_order() -> None:
    # The validate mode compares the queue with the priority arithmetic after every
    # step; here jobs of mixed priorities cross the age cap while others arrive.
    import random

    from rbs.scheduler.sim import Outcome, Simulator

    config = SchedulerConfig(heartbeat_timeout=1e9, age_interval=1.0, age_max=3)
    sched = Scheduler(config, validate=True)
    rng = random.Random(5)
    sim = Simulator(sched, lambda _: Outcome(duration=rng.uniform(0.5, 4)), heartbeat=None)
    sim.add_worker(worker_up("w0", cpus=2, mem_gb=8, slots=2))
    for i in range(120):
        sim.submit(
            manifest(res=(rng.choice((1, 2)), 1, 0), priority=rng.randrange(0, 4)), time=i * 0.3
        )
    sim.run(until=10_000)
    assert not sched.has_unfinished_jobs()


def _antichain_case(shapes: int) -> tuple[float, float]:
    # Sixteen-cpu workers full of one-cpu jobs, so an exit frees one cpu, and `shapes`
    # pending jobs of which none is at least as big as another (cpu grows as memory
    # shrinks): each one the pass reaches fails on its own and joins the failures every
    # later shape is compared with. Returns (failure comparisons, failed shapes reached)
    # per exit.
    workers = 200
    running: list[Event] = [
        Submit(manifest=manifest(res=(1, 1, 0), time_limit=1000 + i)) for i in range(16 * workers)
    ]
    pending: list[Event] = [
        Submit(
            manifest=manifest(
                res=(2 + i / 1000, 1 + (shapes - i) / 1024, 0), time_limit=100_000, name=f"j{i}"
            )
        )
        for i in range(shapes)
    ]
    sched, started = _full_cluster(workers, cpus=16, slots=16, running=running, pending=pending)
    checks, reached = sched.work.failure_checks, sched.work.shapes_examined
    _work_per_exit(sched, started, exits=20, expect_start=False)
    return (sched.work.failure_checks - checks) / 20, (sched.work.shapes_examined - reached) / 20


def test_one_exit_compares_each_pending_shape_with_each_failure_at_most_once() -> None:
    # One task end on a full cluster with many pending shapes. With few distinct shapes
    # the pass also asks, after each failure, whether any shape left can start; the
    # answers kept per shape mean no shape is compared twice with one failure (or one
    # request no worker has free) in a pass: at most 2 x shapes x failures comparisons.
    depth = SchedulerConfig().pass_depth
    few_checks, few_reached = _antichain_case(100)
    assert few_reached >= 50, few_reached  # the pass does meet most of them
    assert 0 < few_checks <= 2 * 100 * few_reached, few_checks
    # With more shapes than that check covers the pass stops at `pass_depth` failures:
    # the comparisons are bounded by depth x depth whatever the number pending.
    small_checks, _ = _antichain_case(500)
    large_checks, large_reached = _antichain_case(10_000)
    assert large_reached <= depth + 1, large_reached
    assert large_checks <= 1.5 * small_checks, (small_checks, large_checks)
    assert large_checks <= 2 * depth * depth, large_checks
