"""What a maintenance window costs a pass, counted (never timed): one step per window and
one per worker it names, never one per worker of the cluster."""

from __future__ import annotations

from sched_harness import manifest, worker_up

from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Event, SetWindows, Submit, TaskExited, Window
from rbs.scheduler.instructions import Instruction, Start

LINEAR = 100  # the size ratio between the two clusters
FAR = 1e6  # the window starts long after every job's time limit: jobs still start


def _work_per_exit(workers: int, named: int | None) -> float:
    """Full one-slot workers, as many jobs pending, and a window from FAR on: over every
    worker (`named` None) or over the first `named`. The mean work of an exit's step."""
    sched = Scheduler(SchedulerConfig(heartbeat_timeout=1e9))
    ids = [f"w{i:05d}" for i in range(workers)]
    sched.handle_many([worker_up(w, cpus=1, mem_gb=64, slots=1) for w in ids], 0.0)
    over = frozenset(ids[:named]) if named is not None else frozenset()
    window = Window(name="maint", start=FAR, end=FAR + 3600, workers=over)
    sched.handle_many([SetWindows(windows=(window,))], 0.5)
    running: list[Event] = [
        Submit(manifest=manifest(res=(1, 1, 0), time_limit=1000 + i)) for i in range(workers)
    ]
    out = sched.handle_many(running, 1.0)
    started = [i for i in out if isinstance(i, Start)]
    assert len(started) == workers, "the running jobs should fill the cluster"
    pending: list[Event] = [
        Submit(manifest=manifest(res=(1, 1, 0), time_limit=5000)) for _ in range(workers)
    ]
    sched.handle_many(pending, 2.0)
    before = sched.work.total()
    now, exits = 3.0, 50
    for start in started[:exits]:
        step: list[Instruction] = sched.handle(
            TaskExited(run=start.run, worker_id=start.worker_id, exit_code=0), now
        )
        assert any(isinstance(i, Start) for i in step), "each exit should start the next job"
        now += 0.001
    return (sched.work.total() - before) / exits


def test_a_window_over_every_worker_costs_a_pass_the_same_on_any_cluster_size() -> None:
    small, large = _work_per_exit(100, None), _work_per_exit(100 * LINEAR, None)
    assert small > 0
    assert large <= 3 * small, (small, large)  # linear growth would be 100x


def test_a_window_over_a_few_workers_costs_what_it_names_not_the_cluster() -> None:
    small = _work_per_exit(100, 5)
    large = _work_per_exit(100 * LINEAR, 5)
    assert large <= 3 * small, (small, large)
    # The counter sees the window's entries: naming every worker of the large cluster one
    # by one costs one step per worker named, in each pass.
    every_named = _work_per_exit(100 * LINEAR, 100 * LINEAR)
    assert every_named >= 100 * LINEAR > 10 * large, (every_named, large)
