"""A discrete-event simulator that drives the pure scheduler core faster than real time.

Simulated workers obey the instructions: a Start becomes a TaskExited after the run's
simulated duration, a Kill becomes an exit by SIGTERM after `kill_delay`. Events at the
same instant are handed to the scheduler as one batch, as a real driver would.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rbs.model import JobManifest
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import (
    Event,
    Heartbeat,
    RunRef,
    Submit,
    TaskExited,
    Tick,
    WorkerDown,
    WorkerUp,
)
from rbs.scheduler.instructions import Accepted, Instruction, Kill, Rejected, Start


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How a simulated run ends: after `duration` seconds (None: never by itself)."""

    duration: float | None = 1.0
    exit_code: int = 0
    oom: bool = False
    peak_memory_bytes: int | None = None


Behaviour = Callable[[Start], Outcome]


@dataclass(slots=True, kw_only=True)
class SimStats:
    """Counts from one simulation."""

    events: int = 0
    batches: int = 0
    instructions: int = 0
    starts: int = 0
    kills: int = 0
    rejected: list[str] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)
    sim_time: float = 0.0
    starts_per_task: dict[tuple[int, int | None], int] = field(default_factory=dict)


class Simulator:
    """Feeds a Scheduler from a time-ordered event heap and plays the workers' part."""

    def __init__(
        self,
        scheduler: Scheduler,
        behaviour: Behaviour = lambda _: Outcome(),
        *,
        tick: float = 1.0,
        kill_delay: float = 0.5,
        heartbeat: float | None = 10.0,
        record_tasks: bool = True,
        quantum: float = 0.0,
    ) -> None:
        self.scheduler = scheduler
        self.behaviour = behaviour
        self.tick = tick
        self.kill_delay = kill_delay
        self.heartbeat = heartbeat
        # Keep every job id and the starts per task in `stats` (off for a million jobs).
        self.record_tasks = record_tasks
        # > 0: every event time is rounded up to a multiple of `quantum`, so what happens
        # within one quantum reaches the core as one batch, as a server's driver takes
        # what queued up while it was busy (0: each distinct instant is its own batch).
        self.quantum = quantum
        self.now = 0.0
        self.stats = SimStats()
        self.on_instructions: Callable[[list[Instruction], float], None] | None = None
        self._heap: list[tuple[float, int, Event | _Crash | _Arrival]] = []
        self._real = 0  # events in the heap other than Tick and Heartbeat
        self._seq = itertools.count()
        self._running: dict[tuple[int, int | None, int, int], str] = {}  # node -> worker
        self._dead: set[str] = set()
        self._arrivals: Iterator[tuple[float, JobManifest]] | None = None

    def at(self, time: float, event: Event | _Crash | _Arrival) -> None:
        if not isinstance(event, Tick | Heartbeat):
            self._real += 1
        if self.quantum > 0:
            time = math.ceil(time / self.quantum) * self.quantum
        heapq.heappush(self._heap, (time, next(self._seq), event))

    def add_worker(self, up: WorkerUp, time: float = 0.0) -> None:
        self.at(time, up)
        if self.heartbeat is not None:
            self.at(time + self.heartbeat, Heartbeat(worker_id=up.worker_id))

    def submit(self, manifest: JobManifest, time: float = 0.0) -> None:
        self.at(time, Submit(manifest=manifest))

    def feed(self, arrivals: Iterator[tuple[float, JobManifest]]) -> None:
        """Submit (time, manifest) pairs in time order, pulled one at a time as the clock
        reaches them, so a million-job workload never sits in memory all at once."""
        self._arrivals = arrivals
        self._pull()

    def _pull(self) -> None:
        if self._arrivals is None:
            return
        for time, manifest in self._arrivals:
            self.at(time, _Arrival(manifest=manifest))
            return
        self._arrivals = None

    def fail_worker(self, worker_id: str, time: float, *, announce: bool = True) -> None:
        """Kill a worker at `time`; announced as WorkerDown, or left to heartbeat loss."""
        self.at(time, _Crash(worker_id=worker_id, announce=announce))

    def run(self, until: float = float("inf"), max_events: int | None = None) -> SimStats:
        """Process events until the heap is empty, `until`, or `max_events`."""
        ticking = False
        while self._heap:
            if not self._real and not self._running and not self.scheduler.has_unfinished_jobs():
                break  # only ticks and heartbeats are left, and nothing waits for them
            time = self._heap[0][0]
            if time > until or (max_events is not None and self.stats.events >= max_events):
                break
            batch: list[Event] = []
            while self._heap and self._heap[0][0] == time:
                ev = heapq.heappop(self._heap)[2]
                if not isinstance(ev, Tick | Heartbeat):
                    self._real -= 1
                if isinstance(ev, _Arrival):
                    self._pull()
                    ev = Submit(manifest=ev.manifest)
                if isinstance(ev, _Crash):
                    self._crash(ev)
                    if not ev.announce:
                        continue
                    ev = WorkerDown(worker_id=ev.worker_id, reason="simulated crash")
                if isinstance(ev, Heartbeat):
                    if ev.worker_id in self._dead:
                        continue
                    assert self.heartbeat is not None
                    self.at(time + self.heartbeat, Heartbeat(worker_id=ev.worker_id))
                if isinstance(ev, TaskExited):
                    if ev.worker_id in self._dead:
                        continue
                    self._running.pop(_key(ev.run), None)
                if isinstance(ev, Tick):
                    ticking = False
                batch.append(ev)
            if not batch:
                continue
            self.now = time
            out = self.scheduler.handle_many(batch, time)
            self.stats.events += len(batch)
            self.stats.batches += 1
            self.stats.instructions += len(out)
            self.stats.sim_time = time
            if self.on_instructions is not None:
                self.on_instructions(out, time)
            self._obey(out, time)
            if not ticking and (
                self._running or self._real or self.scheduler.has_unfinished_jobs()
            ):
                self.at(time + self.tick, Tick())
                ticking = True
        return self.stats

    def _obey(self, out: list[Instruction], now: float) -> None:
        for ins in out:
            if isinstance(ins, Start):
                self._start(ins, now)
            elif isinstance(ins, Kill):
                self.stats.kills += 1
                key = _key(ins.run)
                if self._running.get(key) == ins.worker_id:
                    self.at(
                        now + self.kill_delay,
                        TaskExited(run=ins.run, worker_id=ins.worker_id, exit_code=143, signal=15),
                    )
            elif isinstance(ins, Accepted):
                if self.record_tasks:
                    self.stats.job_ids.append(ins.job_id)
            elif isinstance(ins, Rejected):
                self.stats.rejected.append(ins.message)

    def _start(self, ins: Start, now: float) -> None:
        self.stats.starts += 1
        if ins.run.rank == 0 and self.record_tasks:
            task = (ins.run.job_id, ins.run.index)
            self.stats.starts_per_task[task] = self.stats.starts_per_task.get(task, 0) + 1
        self._running[_key(ins.run)] = ins.worker_id
        outcome = self.behaviour(ins)
        if outcome.duration is None:
            return
        self.at(
            now + outcome.duration,
            TaskExited(
                run=ins.run,
                worker_id=ins.worker_id,
                exit_code=outcome.exit_code,
                oom=outcome.oom,
                peak_memory_bytes=outcome.peak_memory_bytes,
            ),
        )

    def _crash(self, ev: _Crash) -> None:
        self._dead.add(ev.worker_id)
        for key, wid in list(self._running.items()):
            if wid == ev.worker_id:
                del self._running[key]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Arrival:
    manifest: JobManifest


@dataclass(frozen=True, slots=True, kw_only=True)
class _Crash:
    worker_id: str
    announce: bool


def _key(run: RunRef) -> tuple[int, int | None, int, int]:
    return (run.job_id, run.index, run.attempt, run.rank)
