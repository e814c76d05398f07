"""Read-only views of scheduler state for `rbs job show` and `rbs job queues`."""

from __future__ import annotations

from dataclasses import dataclass

from rbs.model import JobManifest, JobState
from rbs.scheduler.compaction import state_of
from rbs.scheduler.instructions import JobChange, TaskRecord
from rbs.scheduler.policy import PriorityBreakdown, breakdown
from rbs.scheduler.state import NO_WORKERS, Job, SchedState


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrayView:
    """Where an array stands: its spec and how many tasks are in each state."""

    spec: str
    total: int
    pending: int
    running: int
    finished: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobView:
    """Everything `rbs job show` prints about one job."""

    job_id: int
    name: str
    queue: str
    state: JobState
    reason: str | None
    priority: PriorityBreakdown
    manifest: JobManifest
    provenance: tuple[tuple[str, str], ...]
    time_limit: int | None
    dependencies: tuple[tuple[str, JobState], ...]  # "afterok:3", state of job 3
    array: ArrayView | None
    attempts: int
    workers: tuple[str, ...]
    runs: tuple[TaskRecord, ...]  # the active runs
    exit_code: int | None
    signal: int | None
    oom: bool
    peak_memory_bytes: int | None
    submit_time: float
    eligible_time: float | None
    start_time: float | None
    end_time: float | None
    user: str  # who submitted it
    parent: int | None  # the job whose run submitted it
    changes: tuple[JobChange, ...]  # who cancelled it (or its tasks), oldest first


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskView:
    """Where one array task (`ID_INDEX`) stands in the live state.

    `state` is None once the task finished: its outcome is in the journal's task rows
    (`Store.task_history`), since the scheduler keeps only counts of finished tasks.
    """

    job_id: int
    index: int
    state: JobState | None
    reason: str | None
    attempt: int  # the running attempt, or the one it will start as
    run: TaskRecord | None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueView:
    """A queue's settings and occupancy, as `rbs job queues` prints them."""

    name: str
    priority_weight: int
    default_time_limit: int | None
    max_time_limit: int | None
    pending_jobs: int
    running_jobs: int
    pending_tasks: int
    running_tasks: int


def pending_reason(st: SchedState, job: Job) -> str | None:
    """The reason the job (or its remaining tasks) wait; None when nothing waits."""
    if job.state.terminal:
        return job.reason
    if not job.pool.pending:
        return None
    throttle = job.manifest.array.throttle if job.manifest.array is not None else None
    if throttle is not None and len(job.runs) >= throttle:
        return "JobArrayTaskLimit"
    if not st.live_workers and job.reason not in ("Dependency", "BeginTime"):
        return NO_WORKERS
    if job.id in st.ready and job.eval_pass != st.pass_no:
        # The last pass did not reach it: its shape was closed (a job of the same shape
        # ahead of it could not start), or the pass stopped before: others come first.
        why = st.last_blocked.get(job.shape)
        if why is not None and not (st.last_reserved and why != "ReqNodeNotAvail"):
            return why
        return "Priority"
    return job.reason


def job_view(st: SchedState, job: Job) -> JobView:
    m = job.manifest
    array = None
    if m.array is not None:
        array = ArrayView(
            spec=str(m.array),
            total=m.array.size,
            pending=job.pool.pending,
            running=len(job.runs),
            finished=tuple(sorted((s.value, n) for s, n in job.pool.counts.items())),
        )
    return JobView(
        job_id=job.id,
        name=m.name,
        queue=m.queue,
        state=job.state,
        reason=pending_reason(st, job),
        priority=breakdown(st.config, job, job.end_time or st.now),  # age stops at the end
        manifest=m,
        provenance=job.provenance,
        time_limit=job.time_limit,
        dependencies=tuple((str(d), state_of(st, d.job_id)) for d in m.dependencies),
        array=array,
        attempts=job.attempts,
        workers=job.workers,
        runs=tuple(r.record() for r in job.runs.values()),
        exit_code=job.exit_code,
        signal=job.signal,
        oom=job.oom,
        peak_memory_bytes=job.peak,
        submit_time=job.submit_time,
        eligible_time=job.eligible_time,
        start_time=job.start_time,
        end_time=job.end_time,
        user=job.user,
        parent=job.parent,
        changes=job.changes,
    )


def queue_views(st: SchedState) -> list[QueueView]:
    counts = {q.name: [0, 0, 0, 0] for q in st.config.queues}
    for job in st.jobs.values():
        if job.state.terminal or job.manifest.queue not in counts:
            continue
        c = counts[job.manifest.queue]
        c[0] += job.state is JobState.PENDING
        c[1] += job.state is JobState.RUNNING
        c[2] += job.pool.pending
        c[3] += len(job.runs)
    return [
        QueueView(
            name=q.name,
            priority_weight=q.priority_weight,
            default_time_limit=q.default_time_limit,
            max_time_limit=q.max_time_limit,
            pending_jobs=counts[q.name][0],
            running_jobs=counts[q.name][1],
            pending_tasks=counts[q.name][2],
            running_tasks=counts[q.name][3],
        )
        for q in st.config.queues
    ]


def task_view(st: SchedState, job: Job, index: int) -> TaskView:
    run = job.runs.get(index)
    if run is not None:
        return TaskView(
            job_id=job.id,
            index=index,
            state=JobState.RUNNING,
            reason=None,
            attempt=run.attempt,
            run=run.record(),
        )
    retry = next((e for e in job.pool.retry if e[0] == index), None)
    if retry is not None or job.pool.is_fresh(index):
        return TaskView(
            job_id=job.id,
            index=index,
            state=JobState.PENDING,
            reason=pending_reason(st, job),
            attempt=retry[1] if retry is not None else 1,
            run=None,
        )
    return TaskView(job_id=job.id, index=index, state=None, reason=None, attempt=0, run=None)
