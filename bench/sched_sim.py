"""Scheduler core throughput: simulated 100,000-task arrays and 10,000 mixed jobs on 50 workers."""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

from rbs.model import JobManifest, Resources
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Submit, TaskExited, WorkerUp
from rbs.scheduler.instructions import Start
from rbs.scheduler.sim import Outcome, SimStats, Simulator
from rbs.wire.specs import parse_array, parse_dependencies

GIB = 1 << 30


def _workers(sim: Simulator, n: int) -> None:
    for i in range(n):
        gpus = tuple(str(g) for g in range(4)) if i % 5 == 0 else ()
        sim.add_worker(
            WorkerUp(
                worker_id=f"w{i:02d}",
                hostname=f"node{i:02d}",
                cpu_millis=32_000,
                memory_bytes=128 * GIB,
                gpus=gpus,
                job_slots=16,
            )
        )


def big_array(tasks: int) -> tuple[SimStats, Scheduler]:
    sched = Scheduler(SchedulerConfig())
    rng = random.Random(1)
    sim = Simulator(sched, lambda _: Outcome(duration=rng.uniform(5, 15)), tick=5.0)
    _workers(sim, 50)
    sim.submit(
        JobManifest(
            name="sweep",
            command=("python", "train.py"),
            resources=Resources(cpu_millis=2000, memory_bytes=4 * GIB),
            array=parse_array(f"0-{tasks - 1}%500"),
            time_limit=60,
        ),
        time=0.0,
    )
    return sim.run(), sched


def mixed_jobs(jobs: int) -> tuple[SimStats, Scheduler]:
    config = SchedulerConfig(
        queues=(
            QueueConfig(name="batch"),
            QueueConfig(name="gpu", priority_weight=100, max_time_limit=7200),
        )
    )
    sched = Scheduler(config)
    rng = random.Random(2)

    def behaviour(start: Start) -> Outcome:
        return Outcome(duration=rng.uniform(10, 300), exit_code=0 if rng.random() > 0.05 else 1)

    sim = Simulator(sched, behaviour, tick=10.0)
    _workers(sim, 50)
    for i in range(jobs):
        gpu = rng.random() < 0.1
        deps = ()
        if i > 10 and rng.random() < 0.2:
            deps = parse_dependencies(f"afterany:{rng.randrange(1, i)}")
        sim.submit(
            JobManifest(
                name=f"job{i}",
                command=("run.sh",),
                queue="gpu" if gpu else "batch",
                priority=rng.randrange(0, 10),
                resources=Resources(
                    cpu_millis=rng.choice((500, 1000, 2000, 4000, 8000)),
                    memory_bytes=rng.choice((1, 2, 8, 16)) * GIB,
                    gpus=rng.choice((1, 2)) if gpu else 0,
                ),
                time_limit=rng.choice((600, 1800, 3600)),
                dependencies=deps,
            ),
            time=i * 0.05,
        )
    return sim.run(), sched


def latencies(pending: int) -> None:
    """Per-event cost with a deep queue: a submission into a full cluster, an exit that starts the next job."""
    sched = Scheduler(SchedulerConfig(heartbeat_timeout=1e9))
    for i in range(50):
        sched.handle(
            WorkerUp(
                worker_id=f"w{i:02d}",
                hostname=f"node{i:02d}",
                cpu_millis=32_000,
                memory_bytes=128 * GIB,
                job_slots=16,
            ),
            0.0,
        )
    m = JobManifest(name="x", command=("x",), resources=Resources(cpu_millis=1000), time_limit=3600)
    running: list[Start] = []
    for _ in range(pending + 800):
        running += [i for i in sched.handle(Submit(manifest=m), 1.0) if isinstance(i, Start)]
    submit = []
    for _ in range(1000):
        t0 = time.perf_counter()
        sched.handle(Submit(manifest=m), 2.0)
        submit.append(time.perf_counter() - t0)
    exits = []
    for start in running[:800]:
        t0 = time.perf_counter()
        out = sched.handle(TaskExited(run=start.run, worker_id=start.worker_id, exit_code=0), 3.0)
        exits.append(time.perf_counter() - t0)
        assert any(isinstance(i, Start) for i in out)
    print(
        f"{pending} pending on 50 full workers: submit median {statistics.median(submit) * 1e3:.2f} ms, "
        f"exit-to-next-start median {statistics.median(exits) * 1e3:.2f} ms"
    )


def _measure(name: str, fn: Callable[[], tuple[SimStats, Scheduler]], repeat: int) -> None:
    rates, walls, cpus = [], [], []
    stats = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        stats, sched = fn()
        wall = time.perf_counter() - t0
        walls.append(wall)
        cpus.append(time.process_time() - c0)
        rates.append(stats.events / wall)
        assert not sched.has_unfinished_jobs(), "simulation ended with unfinished jobs"
    assert stats is not None
    print(
        f"{name}: {stats.events} events, {stats.starts} starts, {stats.batches} batches, "
        f"{stats.sim_time:.0f} simulated s; median {statistics.median(walls):.2f} s wall "
        f"({statistics.median(cpus):.2f} s cpu), "
        f"{statistics.median(rates):,.0f} events/s, "
        f"{stats.starts / statistics.median(walls):,.0f} starts/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--array-tasks", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    _measure(
        f"array of {args.array_tasks} tasks %500, 50 workers",
        lambda: big_array(args.array_tasks),
        args.repeat,
    )
    _measure(f"{args.jobs} mixed jobs, 50 workers", lambda: mixed_jobs(args.jobs), args.repeat)
    latencies(args.jobs)


if __name__ == "__main__":
    main()
