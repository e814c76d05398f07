"""How long preemption takes to free a node, in the scheduler core (`bench/sched_sim.py --preempt`).

A full cluster: every worker (32 cpus, 32 slots) runs 32 one-cpu preemptible jobs of
queue `low`. Jobs of queue `high` (which preempts `low`), each asking for a whole node,
arrive one at a time. For each, the figures are:
- choose: the core's time for the step that takes the submit, picks the victims and
  sends their kills (the free-node decision);
- start: the core's time for the step that takes the victims' exits and starts the
  high job on the freed node;
- the victims per preemption (32: one whole node, the fewest that free it).
Each high job then ends, and its requeued victims fill the node again.
Between the two steps the victims handle SIGTERM on their workers (at most the
worker's grace period, 10 s by default, before SIGKILL): that wall time is the job's
own and adds to the core's figures; it is not measured here. Medians and p99 over the arrivals, at
several cluster sizes, with the log-log slope over workers (0: flat; 1: linear).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Sequence

from rbs.model import JobManifest, KillReason, Resources
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Event, RunRef, Submit, TaskExited, WorkerUp
from rbs.scheduler.instructions import Kill, Start

GIB = 1 << 30
NODE_CPUS = 32
CONFIG = SchedulerConfig(
    queues=(
        QueueConfig(name="low"),
        QueueConfig(name="high", priority_weight=100, preempts=("low",)),
    ),
    heartbeat_timeout=1e12,
)


def _fill(workers: int) -> Scheduler:
    sched = Scheduler(CONFIG)
    ups: list[Event] = [
        WorkerUp(
            worker_id=f"w{i:05d}",
            hostname=f"node{i:05d}",
            cpu_millis=NODE_CPUS * 1000,
            memory_bytes=256 * GIB,
            job_slots=NODE_CPUS,
        )
        for i in range(workers)
    ]
    sched.handle_many(ups, 0.0)
    low = JobManifest(
        name="low",
        command=("train",),
        queue="low",
        preemptible=True,
        resources=Resources(cpu_millis=1000, memory_bytes=GIB),
    )
    batch = [Submit(manifest=low) for _ in range(workers * NODE_CPUS)]
    for i in range(0, len(batch), 10_000):
        sched.handle_many(batch[i : i + 10_000], 1.0)
    return sched


def measure(workers: int, arrivals: int) -> tuple[list[float], list[float], list[int]]:
    sched = _fill(workers)
    high = JobManifest(
        name="high",
        command=("urgent",),
        queue="high",
        resources=Resources(cpu_millis=NODE_CPUS * 1000, memory_bytes=8 * GIB),
    )
    choose, start, victims = [], [], []
    now = 2.0
    for _ in range(arrivals):
        now += 1.0
        t0 = time.perf_counter()
        out = sched.handle(Submit(manifest=high), now)
        choose.append(time.perf_counter() - t0)
        kills = [i for i in out if isinstance(i, Kill) and i.reason is KillReason.PREEMPT]
        victims.append(len(kills))
        now += 10.0  # the grace, on the workers
        exits: list[Event] = [
            TaskExited(
                run=RunRef(job_id=k.run.job_id, index=None, attempt=k.run.attempt, rank=0),
                worker_id=k.worker_id,
                exit_code=143,
                signal=15,
            )
            for k in kills
        ]
        t0 = time.perf_counter()
        out = sched.handle_many(exits, now)
        start.append(time.perf_counter() - t0)
        started = [i for i in out if isinstance(i, Start) and i.manifest.name == "high"]
        if len(started) != 1:
            raise SystemExit(f"{workers} workers: the high job did not start on the freed node")
        # It ends; its victims, requeued, fill the node again (not measured).
        now += 1.0
        ended = TaskExited(run=started[0].run, worker_id=started[0].worker_id, exit_code=0)
        sched.handle(ended, now)
    return choose, start, victims


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="worker counts, comma-separated")
    parser.add_argument("--arrivals", type=int, default=20, help="high jobs per size")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    medians = []
    for w in sizes:
        choose, start, victims = measure(w, args.arrivals)
        medians.append(statistics.median(choose) + statistics.median(start))
        print(
            f"preemption, {w:>6,} full workers ({w * NODE_CPUS:,} preemptible jobs): "
            f"choose victims p50 {statistics.median(choose) * 1e3:.2f} ms "
            f"p99 {_p(choose, 0.99) * 1e3:.2f} ms; start on the freed node p50 "
            f"{statistics.median(start) * 1e3:.2f} ms p99 {_p(start, 0.99) * 1e3:.2f} ms; "
            f"victims per node freed: {statistics.median(victims):.0f}; "
            f"node free after core {medians[-1] * 1e3:.2f} ms + the victims' grace",
            flush=True,
        )
    if len(sizes) >= 2:
        print(f"  slope of core time to free a node over workers: {slope(sizes, medians):.2f}")


if __name__ == "__main__":
    main()
