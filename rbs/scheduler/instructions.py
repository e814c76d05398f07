"""What the scheduler core asks its driver to do: journal records, start and kill runs."""

from __future__ import annotations

from dataclasses import dataclass

from rbs.model import UNKNOWN_USER, JobManifest, JobState, KillReason
from rbs.scheduler.events import RunRef, WorkerUp


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    """One node of a run: where it runs and exactly what it holds there."""

    rank: int
    worker_id: str
    cpu_millis: int
    memory_bytes: int
    gpus: tuple[str, ...]
    master_port: int | None = None  # held on rank 0's worker for the gang's rendezvous
    exited: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One attempt of one task; `active` while any of its nodes may still be running."""

    job_id: int
    index: int | None
    attempt: int
    state: JobState
    nodes: tuple[NodeRecord, ...]
    start_time: float
    confirmed_time: float | None = None
    deadline: float | None = None
    end_time: float | None = None
    ending: str | None = None  # the KillReason value of a requested stop
    retries_used: int = 0
    exit_code: int | None = None
    signal: int | None = None
    oom: bool = False
    peak_memory_bytes: int | None = None
    active: bool = True
    restarts_used: int = 0  # requeues after worker loss before this attempt
    reason: str | None = None  # why it ended (rbs.scheduler.endings), once it has


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRecord:
    """An array's task bookkeeping: a cursor over the index ranges, not one row per task."""

    range_i: int
    next_value: int
    retry: tuple[tuple[int, int, int, int], ...]  # (index, attempt, retries, restarts used)
    skipped: tuple[int, ...]  # cancelled before they were reached by the cursor
    counts: tuple[tuple[str, int], ...]  # terminal state name -> tasks


@dataclass(frozen=True, slots=True, kw_only=True)
class JobChange:
    """One change a user made to a job (today: a cancel, of the job or of `ID_INDEX`)."""

    action: str  # "cancel" or "cancel ID_INDEX"
    by: str
    at: float


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRecord:
    """Everything about a job that a restarted scheduler needs, except its active runs."""

    job_id: int
    manifest: JobManifest
    provenance: tuple[tuple[str, str], ...]
    submit_time: float
    eligible_time: float | None
    time_limit: int | None  # the effective limit: the manifest's or the queue default
    state: JobState
    reason: str | None
    start_time: float | None
    end_time: float | None
    exit_code: int | None
    pool: PoolRecord
    attempts: int = 0  # the highest attempt number started so far
    workers: tuple[str, ...] = ()  # where the latest run ran, rank order
    signal: int | None = None
    oom: bool = False
    peak_memory_bytes: int | None = None
    user: str = UNKNOWN_USER  # who submitted it
    parent: int | None = None  # the job whose run submitted it
    changes: tuple[JobChange, ...] = ()  # who changed it (cancelled it), oldest first


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRecord:
    """A worker as registered; `alive` is False after it was lost or left."""

    worker_id: str
    hostname: str
    address: str
    cpu_millis: int
    memory_bytes: int
    gpus: tuple[str, ...]
    job_slots: int
    master_ports: tuple[int, int]
    alive: bool
    containers: bool = False  # has a container runtime (not journaled: said at each Register)

    @classmethod
    def of(cls, ev: WorkerUp, default_ports: tuple[int, int]) -> WorkerRecord:
        """The record of a worker that just registered."""
        return cls(
            worker_id=ev.worker_id,
            hostname=ev.hostname,
            address=ev.address or ev.hostname,
            cpu_millis=ev.cpu_millis,
            memory_bytes=ev.memory_bytes,
            gpus=ev.gpus,
            job_slots=ev.job_slots,
            master_ports=ev.master_ports or default_ports,
            alive=True,
            containers=bool(ev.container_runtimes),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveJob:
    """Journal this job row (upsert) before acting on the instructions that follow."""

    record: JobRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveTask:
    """Journal this run row (upsert by job, index, attempt)."""

    record: TaskRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveWorker:
    """Journal this worker row (upsert)."""

    record: WorkerRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """A Submit was accepted as job `job_id` (answer the client once the Saves are durable)."""

    event_id: str
    job_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected:
    """An event was refused and changed nothing; `message` says what was wrong and how to fix it."""

    event_id: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Start:
    """Run one node of one attempt on a worker, with its pinned GPUs and environment.

    `env` is complete: the manifest's env plus RBS_JOB_ID, RBS_ATTEMPT, RBS_ARRAY_INDEX,
    CUDA_VISIBLE_DEVICES and, for gangs, the node list and rendezvous variables.
    """

    run: RunRef
    worker_id: str
    manifest: JobManifest
    cpu_millis: int
    memory_bytes: int
    gpus: tuple[str, ...]
    nodelist: tuple[str, ...]
    master_addr: str
    master_port: int | None
    time_limit: int | None
    env: tuple[tuple[str, str], ...]

    @property
    def lease_id(self) -> str:
        return self.run.lease_id


@dataclass(frozen=True, slots=True, kw_only=True)
class Kill:
    """Stop one node of a run (SIGTERM, then SIGKILL after the worker's grace period)."""

    run: RunRef
    worker_id: str
    reason: KillReason


@dataclass(frozen=True, slots=True, kw_only=True)
class Note:
    """Write a `sys` line into the log of one attempt: what the scheduler did to it and why."""

    job_id: int
    index: int | None
    attempt: int
    text: str


Instruction = SaveJob | SaveTask | SaveWorker | Accepted | Rejected | Start | Kill | Note
