"""The events the scheduler core handles: submissions, cancels, worker and task reports, ticks."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from rbs.model import UNKNOWN_USER, JobManifest
from rbs.wire.specs import SpecError, parse_task_id

_ids = itertools.count(1)


def _next_id() -> str:
    # Ids only label events in logs and Accepted instructions; they carry no meaning.
    return f"ev{next(_ids)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRef:
    """A whole job (`index=None`) or one array task, as addressed by `ID` / `ID_INDEX`."""

    job_id: int
    index: int | None = None

    @classmethod
    def parse(cls, text: str) -> TaskRef:
        job_id, index = parse_task_id(text)
        return cls(job_id=job_id, index=index)

    def __str__(self) -> str:
        return str(self.job_id) if self.index is None else f"{self.job_id}_{self.index}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRef:
    """One node of one attempt of one task: what a worker runs and reports on."""

    job_id: int
    index: int | None = None
    attempt: int = 1
    rank: int = 0

    @property
    def task(self) -> TaskRef:
        return TaskRef(job_id=self.job_id, index=self.index)

    @property
    def lease_id(self) -> str:
        """A stable lease id, `JOB[_INDEX].ATTEMPT.RANK`, for the wire protocol."""
        return f"{self.task}.{self.attempt}.{self.rank}"

    @classmethod
    def parse_lease(cls, lease_id: str) -> RunRef:
        parts = lease_id.split(".")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise SpecError("lease id", lease_id, "malformed", "JOB[_INDEX].ATTEMPT.RANK")
        job_id, index = parse_task_id(parts[0], "lease id")
        return cls(job_id=job_id, index=index, attempt=int(parts[1]), rank=int(parts[2]))


@dataclass(frozen=True, slots=True, kw_only=True)
class Submit:
    """A new job; provenance maps manifest fields to where their values came from.

    `user` submitted it; `parent` is the job whose run submitted it with its scoped token
    (counted against `[jobs] max_child_jobs`), None for a job a person submitted."""

    manifest: JobManifest
    provenance: tuple[tuple[str, str], ...] = ()
    user: str = UNKNOWN_USER
    parent: int | None = None
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancel:
    """Cancel whole jobs or single array tasks; pending ones end now, running ones get Kill.

    `by` is the user who asked, recorded in each job's changes."""

    targets: tuple[TaskRef, ...]
    by: str = UNKNOWN_USER
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Requeue:
    """Stop running tasks and queue them again (attempt + 1, not counted as a retry).

    With `preempt`, a job submitted with --no-requeue ends as PREEMPTED instead.
    """

    targets: tuple[TaskRef, ...]
    preempt: bool = False
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskExited:
    """A node of a run ended; `signal` is set when a signal ended it, `oom` when the OOM killer did."""

    run: RunRef
    worker_id: str
    exit_code: int
    signal: int | None = None
    oom: bool = False
    peak_memory_bytes: int | None = None
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerUp:
    """A worker (re)connected: its resources, and after a reconnect what it still runs.

    `running` lists the runs the worker still has; `finished` the ones that ended while it
    was disconnected. Runs the scheduler placed there but missing from both are lost.
    `master_ports` is the port range the worker offers gang rendezvous (rank 0 there).
    """

    worker_id: str
    hostname: str
    address: str = ""
    cpu_millis: int
    memory_bytes: int
    gpus: tuple[str, ...] = ()
    job_slots: int
    master_ports: tuple[int, int] | None = None
    container_runtimes: tuple[str, ...] = ()  # e.g. ("podman",): it takes container jobs
    running: tuple[RunRef, ...] = ()
    finished: tuple[TaskExited, ...] = ()
    event_id: str = field(default_factory=_next_id)

    def __post_init__(self) -> None:
        if not self.worker_id:
            raise ValueError("a worker needs an id")
        if self.cpu_millis < 1 or self.memory_bytes < 1 or self.job_slots < 0:
            raise ValueError(
                f"worker {self.worker_id}: cpus, memory must be positive and job_slots >= 0"
            )
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"worker {self.worker_id} lists a GPU id twice: {self.gpus}")


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerDown:
    """A worker left or is known dead: its runs are requeued (or end NODE_FAIL)."""

    worker_id: str
    reason: str = "worker down"
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerUnreachable:
    """The server lost its stream to a worker: no new runs go there, but its runs are
    kept (their lease may outlive the outage) until it reconnects or is silent for
    `heartbeat_timeout`."""

    worker_id: str
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """A worker is alive."""

    worker_id: str
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStarted:
    """A worker confirms a run's process started; the time limit counts from here."""

    run: RunRef
    worker_id: str
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """Change a pending job (`rbs job update`): its manifest with the new begin time,
    priority, time limit or queue layered in (rbs.scheduler.update checks them).

    `by` asked; `admin` says whether they hold the admin role, which raising the priority
    or the time limit takes."""

    job_id: int
    manifest: JobManifest
    provenance: tuple[tuple[str, str], ...] = ()
    by: str = UNKNOWN_USER
    admin: bool = False
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Workers held from `start` to `end` (epoch seconds; `end` may be inf: a drain).

    `workers` empty means every worker."""

    name: str
    start: float
    end: float
    workers: frozenset[str] = frozenset()
    reason: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a maintenance window needs a name")
        if not (math.isfinite(self.start) and self.end > self.start):
            raise ValueError(f"window {self.name}: its end must come after its start")

    def affects(self, worker_id: str) -> bool:
        return not self.workers or worker_id in self.workers

    def overlaps(self, other: Window) -> bool:
        shared = not self.workers or not other.workers or bool(self.workers & other.workers)
        return shared and self.start < other.end and other.start < self.end


@dataclass(frozen=True, slots=True, kw_only=True)
class SetWindows:
    """The maintenance windows and drains now in force or to come (all of them)."""

    windows: tuple[Window, ...]
    event_id: str = field(default_factory=_next_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """Time passed: time limits, heartbeat loss, begin times and age bonuses are checked."""

    event_id: str = field(default_factory=_next_id)


Event = (
    Submit
    | Cancel
    | Requeue
    | TaskExited
    | WorkerUp
    | WorkerDown
    | WorkerUnreachable
    | Heartbeat
    | TaskStarted
    | Tick
    | Update
    | SetWindows
)
