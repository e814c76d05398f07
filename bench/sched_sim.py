"""Scheduler core at scale: a synthetic cluster workload replayed through the pure core.

Default run: 1,000,000 jobs on 10,000 simulated workers (`--jobs`, `--workers` for
smaller, quicker runs), the same workload through a plain FIFO pass (`pass_depth=1`:
the pass stops at the first job that does not fit, so nothing skips ahead), and curves
of the per-decision cost at four or more sizes over two orders of magnitude, each with
its log-log slope (0: flat; 1: linear).

The workload (seeded, deterministic), after the shapes reported for HPC logs (Feitelson's
Parallel Workloads Archive; Lublin and Feitelson 2003):
- arrivals: a Poisson process whose rate follows a daily cycle (x1.5 at the peak,
  x0.5 at night), scaled so that the offered work is `--load` (0.9) of the capacity;
- sizes: cpus 1 (45%), 2, 4 (15% each), 8 (12%), 16 (8%), 32 (a whole node, 5%); 2, 4
  or 8 GiB of memory per cpu; 8% of jobs ask for 1, 2, 4 or 8 GPUs (with 4 cpus and
  32 GiB per GPU); 0.5% are gangs of 2, 4 or 8 whole nodes;
- runtimes: log-normal, median 10 minutes, sigma 1.6, clipped to 5 s .. 24 h;
- time limits: the runtime times U(1.2, 4), rounded up to the usual choices (15 min,
  30 min, 1, 2, 4, 8, 12, 24, 48 h), as users over-ask.
Workers: 32 cpus, 32 job slots; 80% with 256 GiB, 20% with 512 GiB and 8 GPUs.

Figures: decisions (starts) per second of core time, p50/p99 latency of a scheduling
step that starts something, memory per pending job (tracemalloc, distinct manifests),
utilisation (cpu-seconds run / (cpus x makespan)) against the bound (total work /
(cpus x the shortest possible makespan)), the same while jobs arrive (busy cpu-seconds
before the last arrival / (cpus x that time), against what the jobs could have run by
then, each from its arrival), mean and p95 wait.

`--quantum 1` hands the core what happens within each simulated second as one batch,
as a busy server's driver takes what queued up; without it (0), at 10,000 workers every
task end is a step and pass of its own and the run takes hours. A progress line goes
to stderr every `--progress` seconds, so the full run can go to the background:
`nohup nice -n 10 python bench/sched_sim.py --no-curves --quantum 1 > /tmp/sim.txt 2>&1 &`.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import math
import random
import resource
import statistics
import sys
import time
import tracemalloc
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rbs.model import JobManifest, Resources
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Event, Submit, TaskExited, WorkerUp
from rbs.scheduler.instructions import Accepted, Instruction, Start
from rbs.scheduler.sim import Outcome, Simulator

GIB = 1 << 30
NODE_CPUS = 32
LIMITS = (900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800)
CPU_CHOICES = ((1, 0.45), (2, 0.15), (4, 0.15), (8, 0.12), (16, 0.08), (32, 0.05))


@dataclass(slots=True)
class Workload:
    """The jobs of one run: runtimes (by job id - 1) and the work they hold."""

    runtimes: array[float]
    cpus: array[int]
    arrivals: array[float]
    arrivals_end: float = 0.0
    latest_end: float = 0.0  # max over jobs of arrival + runtime
    work: float = 0.0  # cpu-seconds


def workers_up(n: int) -> list[Event]:
    ups: list[Event] = []
    for i in range(n):
        gpu = i % 5 == 0
        ups.append(
            WorkerUp(
                worker_id=f"w{i:05d}",
                hostname=f"node{i:05d}",
                cpu_millis=NODE_CPUS * 1000,
                memory_bytes=(512 if gpu else 256) * GIB,
                gpus=tuple(str(g) for g in range(8)) if gpu else (),
                job_slots=NODE_CPUS,
            )
        )
    return ups


def _cpus(rng: random.Random) -> int:
    r, acc = rng.random(), 0.0
    for cpus, p in CPU_CHOICES:
        acc += p
        if r < acc:
            return cpus
    return NODE_CPUS


def workload(jobs: int, workers: int, load: float, seed: int = 7) -> tuple[Workload, Iterator]:
    """The arrivals as a lazy iterator of (time, manifest), and the workload's figures."""
    rng = random.Random(seed)
    capacity = workers * NODE_CPUS
    # Mean work per job, estimated from a sample of the same distributions.
    sample = random.Random(seed + 1)
    mean_work = statistics.fmean(
        _cpus(sample) * min(86400.0, max(5.0, sample.lognormvariate(math.log(600), 1.6)))
        for _ in range(20_000)
    )
    rate = load * capacity / mean_work  # jobs per second that offer `load` of the cpus
    w = Workload(runtimes=array("d"), cpus=array("l"), arrivals=array("d"))
    shared: dict[tuple[int, int, int, int, int], JobManifest] = {}

    def gen() -> Iterator[tuple[float, JobManifest]]:
        t = 0.0
        peak = 1.5 * rate
        for _ in range(jobs):
            while True:  # thinning: a non-homogeneous Poisson process with a daily cycle
                t += rng.expovariate(peak)
                if rng.random() < (1 + 0.5 * math.sin(2 * math.pi * t / 86400)) / 1.5:
                    break
            nodes, gpus = 1, 0
            r = rng.random()
            if r < 0.005:
                nodes, cpus, mem = rng.choice((2, 4, 8)), NODE_CPUS, 200
            elif r < 0.085:
                gpus = rng.choice((1, 2, 4, 8))
                cpus, mem = 4 * gpus, 32 * gpus
            else:
                cpus = _cpus(rng)
                mem = min(240, cpus * rng.choice((2, 4, 8)))
            runtime = min(86400.0, max(5.0, rng.lognormvariate(math.log(600), 1.6)))
            want = runtime * rng.uniform(1.2, 4.0)
            limit = LIMITS[min(len(LIMITS) - 1, bisect.bisect_left(LIMITS, want))]
            key = (cpus, mem, gpus, nodes, limit)
            m = shared.get(key)
            if m is None:
                m = shared[key] = JobManifest(
                    name="sim",
                    command=("run",),
                    resources=Resources(cpu_millis=cpus * 1000, memory_bytes=mem * GIB, gpus=gpus),
                    time_limit=limit,
                    nodes=nodes,
                )
            w.runtimes.append(runtime)
            w.arrivals.append(t)
            w.cpus.append(cpus * nodes)
            w.work += cpus * nodes * runtime
            w.latest_end = max(w.latest_end, t + runtime)
            w.arrivals_end = t
            yield t, m

    return w, gen()


class TimedScheduler(Scheduler):
    """The core, with the wall time of every step that started something recorded."""

    def __init__(self, config: SchedulerConfig, forget_ended: bool = False) -> None:
        super().__init__(config, forget_ended=forget_ended)
        self.step_times: array[float] = array("d")
        self.core_time = 0.0
        self.starts = 0

    def handle_many(self, events: Sequence[Event], now: float) -> list[Instruction]:
        t0 = time.perf_counter()
        out = super().handle_many(events, now)
        dt = time.perf_counter() - t0
        self.core_time += dt
        n = sum(1 for i in out if isinstance(i, Start))
        if n:
            self.starts += n
            self.step_times.append(dt)
        return out


@dataclass(slots=True)
class Result:
    label: str
    jobs: int
    workers: int
    starts: int
    core_s: float
    p50_ms: float
    p99_ms: float
    util: float
    bound: float
    steady: float  # utilisation while jobs arrive: [0, last arrival]
    steady_bound: float
    mean_wait: float
    p95_wait: float
    makespan: float

    def line(self) -> str:
        return (
            f"{self.label:>8} {self.jobs:>9,} jobs {self.workers:>6,} workers: "
            f"{self.starts / self.core_s:>8,.0f} decisions/s, step p50 {self.p50_ms:.3f} ms "
            f"p99 {self.p99_ms:.3f} ms; utilisation {self.util:.3f} (bound {self.bound:.3f}), "
            f"while jobs arrive {self.steady:.3f} (bound {self.steady_bound:.3f}); "
            f"wait mean {self.mean_wait:,.0f} s p95 {self.p95_wait:,.0f} s; "
            f"makespan {self.makespan / 3600:.1f} h; core {self.core_s:.1f} s"
        )


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def replay(
    jobs: int, workers: int, load: float, fifo: bool, progress: float = 0.0, quantum: float = 0.0
) -> Result:
    """One run; with `progress` > 0, a progress line every that many seconds (stderr);
    with `quantum` > 0, events within one quantum of simulated time make one batch."""
    config = SchedulerConfig(heartbeat_timeout=1e12, pass_depth=1 if fifo else 100)
    # Ended jobs leave the core's memory, as in the server (`rbs remote serve`).
    sched = TimedScheduler(config, forget_ended=True)
    w, arrivals = workload(jobs, workers, load)
    submitted: array[float] = array("d")
    waits: array[float] = array("d")
    busy: list[float] = [0.0]  # cpu-seconds run before the last arrival (filled at the end)
    started_at: array[float] = array("d")  # start time of rank 0, by job id - 1
    label = "fifo" if fifo else "backfill"
    t_begin = time.perf_counter()
    next_report = [t_begin + progress]
    last = [0, 0.0]  # starts and core time at the last progress line

    def behaviour(start: Start) -> Outcome:
        return Outcome(duration=w.runtimes[start.run.job_id - 1])

    def record(out: list[Instruction], now: float) -> None:
        for ins in out:
            if isinstance(ins, Accepted):
                submitted.append(now)
                started_at.append(-1.0)
            elif isinstance(ins, Start) and ins.run.rank == 0:
                waits.append(now - submitted[ins.run.job_id - 1])
                started_at[ins.run.job_id - 1] = now
        if progress > 0 and time.perf_counter() >= next_report[0]:
            next_report[0] = time.perf_counter() + progress
            recent = (sched.starts - last[0]) / max(sched.core_time - last[1], 1e-9)
            last[:] = [sched.starts, sched.core_time]
            print(
                f"  [{label} {jobs:,}/{workers:,}] {time.perf_counter() - t_begin:,.0f} s: "
                f"sim {now / 3600:.1f} h, {len(submitted):,} submitted, {len(waits):,} started, "
                f"{len(submitted) - len(waits):,} waiting; "
                f"{sched.starts / max(sched.core_time, 1e-9):,.0f} decisions/s of core time "
                f"({recent:,.0f} since the last line); "
                f"max RSS {_rss_mib():,.0f} MiB",
                file=sys.stderr,
                flush=True,
            )

    sim = Simulator(
        sched, behaviour, tick=30.0, heartbeat=None, record_tasks=False, quantum=quantum
    )
    sim.on_instructions = record
    sched.handle_many(workers_up(workers), 0.0)
    sim.feed(arrivals)
    stats = sim.run()
    assert not stats.rejected, stats.rejected[:3]
    assert not sched.has_unfinished_jobs(), "the simulation ended with unfinished jobs"
    capacity = workers * NODE_CPUS
    makespan = stats.sim_time
    steps = sorted(sched.step_times)
    ws = sorted(waits)
    end = w.arrivals_end
    for i, t in enumerate(started_at):
        busy[0] += w.cpus[i] * max(0.0, min(t + w.runtimes[i], end) - t)
    # At best a job runs from its arrival on; nothing runs past the window's end.
    reachable = sum(
        c * max(0.0, min(d, end - a))
        for c, d, a in zip(w.cpus, w.runtimes, w.arrivals, strict=True)
    )
    return Result(
        label=label,
        jobs=jobs,
        workers=workers,
        starts=sched.starts,
        core_s=sched.core_time,
        p50_ms=steps[len(steps) // 2] * 1e3,
        p99_ms=steps[int(len(steps) * 0.99)] * 1e3,
        util=w.work / (capacity * makespan),
        bound=w.work / (capacity * max(w.work / capacity, w.latest_end)),
        steady=busy[0] / (capacity * end),
        steady_bound=min(1.0, reachable / (capacity * end)),
        mean_wait=statistics.fmean(ws),
        p95_wait=ws[int(len(ws) * 0.95)],
        makespan=makespan,
    )


def slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope of log(value) over log(size): 0 flat, 1 linear."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(v, 1e-12)) for v in values]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def full_cluster_latency(workers: int, pending: int, shapes: int, exits: int = 300) -> float:
    """Median wall time from one task's end to the next start, on a full cluster."""
    sched = Scheduler(SchedulerConfig(heartbeat_timeout=1e12))
    sched.handle_many(workers_up(workers), 0.0)
    one = Resources(cpu_millis=1000, memory_bytes=GIB)
    fill: list[Event] = [
        Submit(
            manifest=JobManifest(
                name="run", command=("x",), resources=one, time_limit=3600 + i % 1000
            )
        )
        for i in range(workers * NODE_CPUS)
    ]
    running = [i for i in sched.handle_many(fill, 1.0) if isinstance(i, Start)]
    waiting: list[Event] = [
        Submit(
            manifest=JobManifest(
                name="wait",
                command=("x",),
                resources=Resources(cpu_millis=1000, memory_bytes=GIB + (i % shapes) * (1 << 20)),
                time_limit=7200,
            )
        )
        for i in range(pending)
    ]
    sched.handle_many(waiting, 2.0)
    rng = random.Random(3)
    rng.shuffle(running)
    times = []
    for n, start in enumerate(running[:exits]):
        t0 = time.perf_counter()
        sched.handle(TaskExited(run=start.run, worker_id=start.worker_id, exit_code=0), 3 + n)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def memory_per_pending(n: int) -> float:
    """Bytes of core memory per pending job (distinct manifests, as real jobs have)."""
    sched = Scheduler(SchedulerConfig(heartbeat_timeout=1e12))
    sched.handle_many(workers_up(1), 0.0)
    big = Resources(cpu_millis=NODE_CPUS * 1000, memory_bytes=GIB)
    sched.handle(Submit(manifest=JobManifest(name="hold", command=("x",), resources=big)), 0.0)
    events: list[Event] = [
        Submit(
            manifest=JobManifest(
                name=f"job-{i}",
                command=("python", "train.py", f"--seed={i}"),
                resources=Resources(cpu_millis=1000 * (1 + i % 4), memory_bytes=GIB),
                time_limit=3600,
                env=(("RUN", str(i)),),
            )
        )
        for i in range(n)
    ]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(0, n, 1000):
        sched.handle_many(events[k : k + 1000], 1.0)
    del events
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # The manifests were made before tracing started: add their size, measured alike.
    tracemalloc.start()
    m0 = tracemalloc.get_traced_memory()[0]
    sample = [
        JobManifest(
            name=f"job-{i}",
            command=("python", "train.py", f"--seed={i}"),
            resources=Resources(cpu_millis=1000 * (1 + i % 4), memory_bytes=GIB),
            time_limit=3600,
            env=(("RUN", str(i)),),
        )
        for i in range(1000)
    ]
    manifest_bytes = (tracemalloc.get_traced_memory()[0] - m0) / len(sample)
    tracemalloc.stop()
    return (after - before) / n + manifest_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--no-fifo", action="store_true", help="skip the FIFO comparison")
    parser.add_argument(
        "--progress",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a progress line on stderr every SECONDS of a replay (0: none)",
    )
    parser.add_argument(
        "--quantum",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="hand the core what happens within SECONDS of simulated time as one batch, "
        "as a busy server's driver does (0: each distinct instant alone)",
    )
    parser.add_argument("--no-curves", action="store_true", help="skip the size curves")
    parser.add_argument(
        "--preempt", action="store_true", help="only how long preemption takes to free a node"
    )
    args = parser.parse_args()
    if args.preempt:
        from sched_preempt import main as preempt_main  # bench/sched_preempt.py

        preempt_main([])
        return

    print(f"memory per pending job (core, 20,000 pending): {memory_per_pending(20_000):,.0f} B")
    if not args.no_curves:
        sizes = [10, 100, 1000, 10_000]
        lat = [full_cluster_latency(w, pending=1000, shapes=1) for w in sizes]
        for w, v in zip(sizes, lat, strict=True):
            print(f"full cluster, {w:>6,} workers: task end to next start {v * 1e6:,.0f} us")
        print(f"  slope over workers: {slope(sizes, lat):.2f}")
        depths = [100, 1000, 10_000, 100_000]
        lat = [full_cluster_latency(100, pending=d, shapes=d) for d in depths]
        for d, v in zip(depths, lat, strict=True):
            print(f"full cluster, {d:>7,} pending of {d:,} shapes: {v * 1e6:,.0f} us")
        print(f"  slope over pending shapes: {slope(depths, lat):.2f}")
    results = []
    scale = [args.workers // f for f in (100, 30, 10, 3) if args.workers // f >= 10]
    if not args.no_curves:
        for workers in scale:
            jobs = args.jobs * workers // args.workers
            results.append(
                replay(
                    jobs,
                    workers,
                    args.load,
                    fifo=False,
                    progress=args.progress,
                    quantum=args.quantum,
                )
            )
            print(results[-1].line(), flush=True)
    main_run = replay(
        args.jobs, args.workers, args.load, fifo=False, progress=args.progress, quantum=args.quantum
    )
    results.append(main_run)
    print(main_run.line(), flush=True)
    print(f"  max RSS of this process so far: {_rss_mib():,.0f} MiB", flush=True)
    if len(results) >= 4:
        ws = [r.workers for r in results]
        print(f"  slope of step p50 over size: {slope(ws, [r.p50_ms for r in results]):.2f}")
        print(f"  slope of step p99 over size: {slope(ws, [r.p99_ms for r in results]):.2f}")
        rates = [r.starts / r.core_s for r in results]
        print(f"  slope of decisions/s over size: {slope(ws, rates):.2f}")
    if not args.no_fifo:
        fifo = replay(
            args.jobs,
            args.workers,
            args.load,
            fifo=True,
            progress=args.progress,
            quantum=args.quantum,
        )
        print(fifo.line(), flush=True)
        print(
            f"  backfill vs fifo: utilisation while jobs arrive {main_run.steady:.3f} vs "
            f"{fifo.steady:.3f} (bound {main_run.steady_bound:.3f}), "
            f"mean wait {main_run.mean_wait:,.0f} s vs {fifo.mean_wait:,.0f} s"
        )


if __name__ == "__main__":
    main()
