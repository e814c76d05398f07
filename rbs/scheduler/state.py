"""The scheduler's mutable state: jobs, runs, workers, and the outbox of instructions."""

from __future__ import annotations

import dataclasses
import heapq
import math

from rbs.model import TERMINAL_STATES, UNKNOWN_USER, JobManifest, JobState, KillReason, Resources
from rbs.scheduler.arrays import TaskPool
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.ended import EndedStates
from rbs.scheduler.events import RunRef, Window
from rbs.scheduler.instructions import (
    Accepted,
    Instruction,
    JobChange,
    JobRecord,
    Kill,
    NodeRecord,
    Note,
    Rejected,
    SaveJob,
    SaveTask,
    SaveWorker,
    Start,
    TaskRecord,
)
from rbs.scheduler.pinning import pinned_shape
from rbs.scheduler.policy import Shape, compute_shape
from rbs.scheduler.ready import ReadyQueue
from rbs.scheduler.releases import STOPPING, ReleaseCalendar
from rbs.scheduler.workers import DrainIndex, FreeIndex, NodeKey, Work, WorkerCapacity

RunKey = tuple[int, int | None, int]  # job id, index, attempt
NO_WORKERS = "NoWorkers"  # the pending reason while no worker at all is up

# Legal job-state moves. An array's aggregate state may go from PENDING straight to a
# terminal state (its last pending tasks cancelled after others failed); a single job
# only leaves PENDING by starting or being cancelled.
_LEGAL: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING} | TERMINAL_STATES),
    JobState.RUNNING: frozenset({JobState.PENDING} | TERMINAL_STATES),
}
# Which non-COMPLETED task outcome names an array's aggregate end state, first wins.
_AGGREGATE = (
    JobState.FAILED,
    JobState.OUT_OF_MEMORY,
    JobState.TIMEOUT,
    JobState.NODE_FAIL,
    JobState.PREEMPTED,
    JobState.CANCELLED,
)


class InvariantError(AssertionError):
    """The scheduler broke one of its own rules: a bug, never a user error."""


class SchedulerError(ValueError):
    """A request the scheduler refuses (unknown job, unknown queue, unsatisfiable size)."""


class Run:
    """One attempt of one task on one or more nodes (a gang when more than one)."""

    __slots__ = (
        "attempt",
        "confirmed_time",
        "deadline",
        "end_time",
        "ending",
        "exit_code",
        "index",
        "job_id",
        "nodes",
        "oom",
        "peak",
        "reason",
        "restarts_used",
        "retries_used",
        "signal",
        "start_time",
        "state",
    )

    def __init__(
        self,
        job_id: int,
        index: int | None,
        attempt: int,
        retries_used: int,
        now: float,
        restarts_used: int = 0,
    ) -> None:
        self.job_id = job_id
        self.index = index
        self.attempt = attempt
        self.retries_used = retries_used
        self.restarts_used = restarts_used
        self.reason: str | None = None
        self.nodes: list[NodeRecord] = []
        self.start_time = now
        self.confirmed_time: float | None = None
        self.deadline: float | None = None
        self.ending: KillReason | None = None
        self.state = JobState.RUNNING
        self.end_time: float | None = None
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.oom = False
        self.peak: int | None = None

    @property
    def key(self) -> RunKey:
        return (self.job_id, self.index, self.attempt)

    def node_key(self, rank: int) -> NodeKey:
        return (self.job_id, self.index, self.attempt, rank)

    def ref(self, rank: int) -> RunRef:
        return RunRef(job_id=self.job_id, index=self.index, attempt=self.attempt, rank=rank)

    @property
    def live_nodes(self) -> list[NodeRecord]:
        return [n for n in self.nodes if not n.exited]

    def mark_exited(self, rank: int) -> None:
        self.nodes[rank] = dataclasses.replace(self.nodes[rank], exited=True)

    def record(self) -> TaskRecord:
        return TaskRecord(
            job_id=self.job_id,
            index=self.index,
            attempt=self.attempt,
            state=self.state,
            nodes=tuple(self.nodes),
            start_time=self.start_time,
            confirmed_time=self.confirmed_time,
            deadline=self.deadline,
            end_time=self.end_time,
            ending=self.ending.value if self.ending else None,
            retries_used=self.retries_used,
            exit_code=self.exit_code,
            signal=self.signal,
            oom=self.oom,
            peak_memory_bytes=self.peak,
            active=bool(self.live_nodes),
            restarts_used=self.restarts_used,
            reason=self.reason,
        )

    @classmethod
    def from_record(cls, rec: TaskRecord) -> Run:
        run = cls(
            rec.job_id, rec.index, rec.attempt, rec.retries_used, rec.start_time, rec.restarts_used
        )
        run.reason = rec.reason
        run.nodes = list(rec.nodes)
        run.confirmed_time = rec.confirmed_time
        run.deadline = rec.deadline
        run.ending = KillReason(rec.ending) if rec.ending else None
        run.state = rec.state
        run.end_time = rec.end_time
        run.exit_code = rec.exit_code
        run.signal = rec.signal
        run.oom = rec.oom
        run.peak = rec.peak_memory_bytes
        return run


class Job:
    """A submitted job: its manifest, state, pending reason, task pool and active runs."""

    __slots__ = (
        "attempts",
        "changes",
        "eligible_time",
        "end_time",
        "eval_pass",
        "exit_code",
        "id",
        "manifest",
        "oom",
        "parent",
        "peak",
        "pool",
        "provenance",
        "reason",
        "runs",
        "shape",
        "signal",
        "start_time",
        "state",
        "submit_time",
        "time_limit",
        "user",
        "workers",
    )

    def __init__(
        self,
        job_id: int,
        manifest: JobManifest,
        provenance: tuple[tuple[str, str], ...],
        time_limit: int | None,
        now: float,
    ) -> None:
        self.id = job_id
        self.manifest = manifest
        self.provenance = provenance
        self.time_limit = time_limit
        self.submit_time = now
        self.eligible_time: float | None = None
        self.state = JobState.PENDING
        self.reason: str | None = None
        self.start_time: float | None = None
        self.end_time: float | None = None
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.oom = False
        self.peak: int | None = None
        self.attempts = 0
        self.workers: tuple[str, ...] = ()
        self.user = UNKNOWN_USER
        self.parent: int | None = None
        self.changes: tuple[JobChange, ...] = ()
        self.pool = TaskPool(manifest.array)
        self.runs: dict[int, Run] = {}  # pool index (0 for a single job) -> active run
        self.shape = compute_shape(
            manifest.resources, manifest.node_range[0], time_limit, manifest.container is not None
        )
        if manifest.cpu_cores:
            self.shape = pinned_shape(self.shape, manifest.cpu_cores)
        self.eval_pass = 0

    @property
    def is_array(self) -> bool:
        return self.manifest.array is not None

    def index_of(self, raw: int) -> int | None:
        return raw if self.manifest.array is not None else None

    @staticmethod
    def raw_of(index: int | None) -> int:
        return 0 if index is None else index

    def record(self) -> JobRecord:
        return JobRecord(
            job_id=self.id,
            manifest=self.manifest,
            provenance=self.provenance,
            submit_time=self.submit_time,
            eligible_time=self.eligible_time,
            time_limit=self.time_limit,
            state=self.state,
            reason=self.reason,
            start_time=self.start_time,
            end_time=self.end_time,
            exit_code=self.exit_code,
            pool=self.pool.to_record(),
            attempts=self.attempts,
            workers=self.workers,
            signal=self.signal,
            oom=self.oom,
            peak_memory_bytes=self.peak,
            user=self.user,
            parent=self.parent,
            changes=self.changes,
        )

    @classmethod
    def from_record(cls, rec: JobRecord) -> Job:
        job = cls(rec.job_id, rec.manifest, rec.provenance, rec.time_limit, rec.submit_time)
        job.eligible_time = rec.eligible_time
        job.state = rec.state
        job.reason = rec.reason
        job.start_time = rec.start_time
        job.end_time = rec.end_time
        job.exit_code = rec.exit_code
        job.pool = TaskPool.from_record(rec.manifest.array, rec.pool)
        job.attempts = rec.attempts
        job.workers = rec.workers
        job.signal = rec.signal
        job.oom = rec.oom
        job.peak = rec.peak_memory_bytes
        job.user = rec.user
        job.parent = rec.parent
        job.changes = rec.changes
        return job


class SchedState:
    """All scheduler state plus the outbox that one `handle` call fills."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.now = 0.0
        self.jobs: dict[int, Job] = {}
        self.ended = EndedStates()  # final states of the ended jobs forgotten (ended.py)
        self.workers: dict[str, WorkerCapacity] = {}
        self.work = Work()
        self.free = FreeIndex(self.work)  # workers with a free slot, in best-fit order
        self.drains = DrainIndex()  # busy workers by when they are empty at the latest
        self.releases: ReleaseCalendar[Run] = ReleaseCalendar()
        # Heartbeat deadlines: (last seen when filed, worker id), one entry per live worker.
        self.silence: list[tuple[float, str]] = []
        self._silence_filed: set[str] = set()
        self.unfinished = 0  # jobs not in a terminal state
        self.live_workers = 0  # workers up (kept by count_worker)
        self.next_id = 1
        self.ready: ReadyQueue[Job] = ReadyQueue(config)
        # What the last pass learnt of the shapes it closed (shape -> reason; reserved?).
        self.last_blocked: dict[Shape, str] = {}
        self.last_reserved = False
        self.dependents: dict[int, list[int]] = {}
        self.begin_heap: list[tuple[float, int]] = []
        self.expiry_heap: list[tuple[float, int]] = []  # --deadline: (when, job id)
        self.deadlines: list[tuple[float, int, int, int]] = []  # deadline, job, raw index, attempt
        self.draining: dict[RunKey, Run] = {}
        self.children: dict[int, int] = {}  # parent job -> child jobs it submitted
        self.windows: tuple[Window, ...] = ()  # maintenance windows, drains (.windows)
        self.held_for: dict[str, tuple[int, float]] = {}  # worker -> preemptor, until
        self.need_pass = True
        self.pass_no = 0
        self.pass_starts = 0  # runs started, ever: lets a pass see that capacity changed
        # How many live (and how many known) workers could ever hold a request; kept up to
        # date as workers come, go or change size, for each request asked about once.
        self._capable: dict[Resources, int] = {}
        self._known: dict[Resources, int] = {}
        self.dirty_jobs: dict[int, Job] = {}
        self.dirty_runs: dict[RunKey, Run] = {}
        self.dirty_workers: dict[str, WorkerCapacity] = {}
        self.actions: list[Accepted | Rejected | Start | Kill | Note] = []

    def add_worker(self, worker: WorkerCapacity) -> None:
        """File a new worker: its index entry, capability counts and heartbeat deadline."""
        worker.seq = len(self.workers)
        self.workers[worker.worker_id] = worker
        worker.index = self.free
        worker.drains = self.drains
        self.free.update(worker)
        self.drains.update(worker)
        self.count_worker(worker, 1, known=True)
        self.watch(worker)

    def count_worker(self, worker: WorkerCapacity, sign: int, known: bool = False) -> None:
        """Add (1) or take (-1) a worker's part in the capability counts; call around changes."""
        if worker.alive:
            self.live_workers += sign
        for res in self._capable:
            if worker.alive and worker.could_ever_fit(res):
                self._capable[res] += sign
        if known:
            for res in self._known:
                if worker.could_ever_fit(res):
                    self._known[res] += sign

    def watch(self, worker: WorkerCapacity) -> None:
        """Make sure a live worker's silence is checked by `Tick`."""
        if worker.alive and worker.worker_id not in self._silence_filed:
            self._silence_filed.add(worker.worker_id)
            heapq.heappush(self.silence, (worker.last_seen, worker.worker_id))

    def silent_workers(self, timeout: float) -> list[WorkerCapacity]:
        """Live workers not heard from for more than `timeout`; O(log W) per worker checked."""
        lost = []
        while self.silence and self.now - self.silence[0][0] > timeout:
            _, wid = heapq.heappop(self.silence)
            self._silence_filed.discard(wid)
            worker = self.workers[wid]
            if not worker.alive:
                continue
            if self.now - worker.last_seen > timeout:
                lost.append(worker)
            else:
                self.watch(worker)
        return lost

    def capable_count(self, res: Resources) -> int:
        """Live workers that could ever hold `res`."""
        n = self._capable.get(res)
        if n is None:
            n = sum(1 for w in self.workers.values() if w.alive and w.could_ever_fit(res))
            self._capable[res] = n
        return n

    def capable_snapshot(self) -> dict[Resources, int]:
        """The capability counts kept so far (for the invariant checks)."""
        return dict(self._capable)

    def known_capable_count(self, res: Resources) -> int:
        """Known workers, live or not, that could ever hold `res`."""
        n = self._known.get(res)
        if n is None:
            n = sum(1 for w in self.workers.values() if w.could_ever_fit(res))
            self._known[res] = n
        return n

    # ---- outbox

    def flush(self) -> list[Instruction]:
        out: list[Instruction] = [
            SaveWorker(record=w.record()) for w in self.dirty_workers.values()
        ]
        out += [SaveJob(record=j.record()) for j in self.dirty_jobs.values()]
        out += [SaveTask(record=r.record()) for r in self.dirty_runs.values()]
        out += self.actions
        self.dirty_workers.clear()
        self.dirty_jobs.clear()
        self.dirty_runs.clear()
        self.actions = []
        return out

    def touch(self, job: Job) -> None:
        self.dirty_jobs[job.id] = job

    def touch_run(self, run: Run) -> None:
        self.dirty_runs[run.key] = run

    # ---- job state

    def set_state(self, job: Job, state: JobState, reason: str | None = None) -> None:
        if state != job.state:
            allowed = _LEGAL.get(job.state, frozenset())
            if state not in allowed or (
                not job.is_array
                and job.state is JobState.PENDING
                and state.terminal
                and state is not JobState.CANCELLED
            ):
                raise InvariantError(
                    f"job {job.id}: illegal move {job.state.value} -> {state.value}"
                )
            if state.terminal:
                self.unfinished -= 1
            job.state = state
            if state is JobState.RUNNING and job.start_time is None:
                job.start_time = self.now
            if state.terminal:
                job.end_time = self.now
        job.reason = reason
        self.touch(job)

    def refresh(self, job: Job) -> JobState:
        """Derive a job's state from its runs and pool; returns the new state."""
        if job.state.terminal:
            return job.state
        pool = job.pool
        if job.runs:
            self.set_state(job, JobState.RUNNING, job.reason if pool.pending else None)
        elif pool.pending:
            self.set_state(job, JobState.PENDING, job.reason or self.waiting_reason())
        else:
            final = JobState.COMPLETED
            for s in _AGGREGATE:
                if pool.counts.get(s):
                    final = s
                    break
            self.set_state(job, final, job.reason if final is JobState.CANCELLED else None)
        return job.state

    def waiting_reason(self) -> str:
        """What a ready job waits for before a pass has looked at it."""
        return "Priority" if self.live_workers else NO_WORKERS

    # ---- instructions

    def kill(self, run: Run, node: NodeRecord, reason: KillReason) -> None:
        self.actions.append(Kill(run=run.ref(node.rank), worker_id=node.worker_id, reason=reason))

    def push_deadline(self, job: Job, run: Run) -> None:
        if run.deadline is not None:
            heapq.heappush(
                self.deadlines, (run.deadline, job.id, job.raw_of(run.index), run.attempt)
            )

    def release_time(self, run: Run) -> float:
        """When a run frees its nodes at the latest: its deadline, STOPPING, or inf if unknown."""
        job = self.jobs.get(run.job_id)
        if job is None or job.runs.get(Job.raw_of(run.index)) is not run:
            return STOPPING  # draining: already told to stop
        if run.ending is not None:
            return STOPPING
        return run.deadline if run.deadline is not None else math.inf

    def sync_release(self, run: Run) -> None:
        """Re-file a run in the release calendar after its deadline, ending or nodes changed."""
        time = self.release_time(run)
        live = False
        for node in run.nodes:
            if not node.exited:
                live = True
                worker = self.workers.get(node.worker_id)
                if worker is not None:
                    worker.set_end(run.node_key(node.rank), time)
        if live:
            self.releases.file(run.key, run, time)
        else:
            self.releases.drop(run.key)
