"""A small harness that drives the scheduler core in tests and reads its instructions."""

from __future__ import annotations

from typing import Any

from rbs.model import JobManifest, JobState, Resources
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import (
    Cancel,
    Event,
    Heartbeat,
    RunRef,
    Submit,
    TaskExited,
    TaskRef,
    Tick,
    WorkerDown,
    WorkerUp,
)
from rbs.scheduler.instructions import Accepted, Instruction, Kill, Rejected, SaveJob, Start

GIB = 1 << 30


def manifest(**kw: Any) -> JobManifest:
    res = kw.pop("res", None)
    kw.setdefault("name", "job")
    kw.setdefault("command", ("true",))
    if res is not None:
        cpu, mem_gb, gpus = res
        kw["resources"] = Resources(
            cpu_millis=int(cpu * 1000), memory_bytes=int(mem_gb * GIB), gpus=gpus
        )
    return JobManifest(**kw)


def worker_up(
    wid: str, cpus: int = 4, mem_gb: int = 16, gpus: int = 0, slots: int = 4, **kw: Any
) -> WorkerUp:
    return WorkerUp(
        worker_id=wid,
        hostname=f"host-{wid}",
        address=f"10.0.0.{abs(hash(wid)) % 250}",
        cpu_millis=cpus * 1000,
        memory_bytes=mem_gb * GIB,
        gpus=tuple(str(g) for g in range(gpus)),
        job_slots=slots,
        **kw,
    )


class Harness:
    """A validating Scheduler with a clock and helpers for events and instruction lists."""

    def __init__(self, config: SchedulerConfig | None = None) -> None:
        # Tests that are not about heartbeats should not lose workers to silence.
        self.sched = Scheduler(config or SchedulerConfig(heartbeat_timeout=1e9), validate=True)
        self.now = 0.0
        self.last: list[Instruction] = []

    def send(self, *events: Event, at: float | None = None) -> list[Instruction]:
        if at is not None:
            self.now = at
        self.last = self.sched.handle_many(events, self.now)
        return self.last

    def up(self, wid: str, **kw: Any) -> list[Instruction]:
        return self.send(worker_up(wid, **kw))

    def submit(self, m: JobManifest | None = None, **kw: Any) -> int:
        out = self.send(Submit(manifest=m or manifest(**kw)))
        rejected = [i for i in out if isinstance(i, Rejected)]
        assert not rejected, rejected[0].message
        (acc,) = [i for i in out if isinstance(i, Accepted)]
        return acc.job_id

    def reject(self, m: JobManifest) -> str:
        out = self.send(Submit(manifest=m))
        (rej,) = [i for i in out if isinstance(i, Rejected)]
        return rej.message

    def exit(
        self,
        job_id: int,
        index: int | None = None,
        attempt: int = 1,
        code: int = 0,
        rank: int = 0,
        worker: str | None = None,
        **kw: Any,
    ) -> list[Instruction]:
        run = RunRef(job_id=job_id, index=index, attempt=attempt, rank=rank)
        if worker is None:
            view = self.sched.job(job_id)
            (rec,) = [r for r in view.runs if r.index == index and r.attempt == attempt] or [None]
            assert rec is not None, f"no active run {run}"
            worker = rec.nodes[rank].worker_id
        return self.send(TaskExited(run=run, worker_id=worker, exit_code=code, **kw))

    def cancel(self, *targets: str) -> list[Instruction]:
        return self.send(Cancel(targets=tuple(TaskRef.parse(t) for t in targets)))

    def tick(self, at: float) -> list[Instruction]:
        return self.send(Tick(), at=at)

    def down(self, wid: str) -> list[Instruction]:
        return self.send(WorkerDown(worker_id=wid))

    def beat(self, *wids: str, at: float | None = None) -> list[Instruction]:
        return self.send(*(Heartbeat(worker_id=w) for w in wids), at=at)

    def state(self, job_id: int) -> JobState:
        return self.sched.job(job_id).state

    def reason(self, job_id: int) -> str | None:
        return self.sched.job(job_id).reason


def starts(out: list[Instruction]) -> list[Start]:
    return [i for i in out if isinstance(i, Start)]


def kills(out: list[Instruction]) -> list[Kill]:
    return [i for i in out if isinstance(i, Kill)]


def saved_states(out: list[Instruction]) -> dict[int, JobState]:
    return {i.record.job_id: i.record.state for i in out if isinstance(i, SaveJob)}


def env(start: Start) -> dict[str, str]:
    return dict(start.env)
