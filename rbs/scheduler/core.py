"""The scheduler core: `Scheduler.handle(event, now) -> instructions`, pure and deterministic.

No I/O, no clock, no randomness: the driver passes events and the time in, journals the
Save* instructions (one transaction per call, before anything else), then carries out
Start, Kill, Accepted and Rejected. See docs/design/scheduler.md.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rbs.model import UNKNOWN_USER, JobManifest, JobState, KillReason
from rbs.scheduler import endings, preempt, restoring
from rbs.scheduler import lifecycle as lc
from rbs.scheduler.compaction import forget_ended, known
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.events import (
    Cancel,
    Event,
    Heartbeat,
    Requeue,
    RunRef,
    Submit,
    TaskExited,
    TaskRef,
    TaskStarted,
    Tick,
    WorkerDown,
    WorkerUnreachable,
    WorkerUp,
)
from rbs.scheduler.instructions import (
    Accepted,
    Instruction,
    JobChange,
    JobRecord,
    Kill,
    NodeRecord,
    Rejected,
    TaskRecord,
    WorkerRecord,
)
from rbs.scheduler.invariants import check_invariants
from rbs.scheduler.pinning import refusal
from rbs.scheduler.placement import schedule
from rbs.scheduler.preempt_holds import lapse_due
from rbs.scheduler.runtimes import refuse_without_runtime
from rbs.scheduler.state import Job, Run, SchedState, SchedulerError
from rbs.scheduler.views import JobView, QueueView, TaskView, job_view, queue_views, task_view
from rbs.scheduler.windows import operator_event
from rbs.scheduler.workers import Work, WorkerCapacity
from rbs.units import format_duration

log = logging.getLogger(__name__)

# The changes kept per job (the latest): a loop cancelling task after task must not
# grow one journal row without bound.
MAX_CHANGES = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The whole durable state, as the journal holds it; equal snapshots, equal schedulers."""

    jobs: tuple[JobRecord, ...]
    tasks: tuple[TaskRecord, ...]
    workers: tuple[WorkerRecord, ...]
    ended: tuple[tuple[int, JobState], ...] = ()  # the ended jobs forgotten (compaction.py)


class Scheduler:
    """Slurm-style job scheduling as a pure state machine."""

    def __init__(
        self,
        config: SchedulerConfig | None = None,
        *,
        validate: bool | None = None,
        forget_ended: bool = False,
    ) -> None:
        self.config = config or SchedulerConfig()
        self.validate = self.config.validate if validate is None else validate
        self.forget_ended = forget_ended  # drop ended jobs once unneeded (compaction.py)
        self._st = SchedState(self.config)

    # ---- driving

    def handle(self, event: Event, now: float) -> list[Instruction]:
        """Apply one event at time `now`; returns Saves first, then actions."""
        return self.handle_many((event,), now)

    def handle_many(self, events: Sequence[Event], now: float) -> list[Instruction]:
        """Apply a batch of events with one scheduling pass at the end (cheaper under load)."""
        st = self._st
        st.now = now
        if st.ready.advance(now):
            st.need_pass = True
        for event in events:
            self._dispatch(event)
        if st.need_pass:
            schedule(st)
        if self.forget_ended:
            forget_ended(st)
        if self.validate:
            check_invariants(st)
        return st.flush()

    def adopt(self, other: Scheduler) -> None:
        """Take over `other`'s state: the journal's rebuild, after a step whose write failed."""
        self._st = other._st

    def _dispatch(self, ev: Event) -> None:
        st = self._st
        if isinstance(ev, Submit):
            try:
                job = self._submit(ev.manifest, ev.provenance, ev.user, ev.parent)
            except (SchedulerError, ValueError) as e:
                st.actions.append(Rejected(event_id=ev.event_id, message=str(e)))
            else:
                st.actions.append(Accepted(event_id=ev.event_id, job_id=job.id))
        elif isinstance(ev, Cancel | Requeue):
            try:
                self._check_targets(ev.targets)
            except SchedulerError as e:
                st.actions.append(Rejected(event_id=ev.event_id, message=str(e)))
                return
            for target in ev.targets:
                if isinstance(ev, Cancel):
                    self._cancel(target, ev.by)
                else:
                    reason = KillReason.PREEMPT if ev.preempt else KillReason.REQUEUE
                    for run in self._runs_of(target):
                        lc.stop_run(st, run, reason)
        elif isinstance(ev, TaskExited):
            self._exited(ev)
        elif isinstance(ev, TaskStarted):
            self._started(ev)
        elif isinstance(ev, WorkerUp):
            try:
                self._worker_up(ev)
            except SchedulerError as e:
                st.actions.append(Rejected(event_id=ev.event_id, message=str(e)))
        elif isinstance(ev, WorkerDown):
            worker = st.workers.get(ev.worker_id)
            if worker is not None and worker.alive:
                lc.worker_lost(st, worker)
        elif isinstance(ev, WorkerUnreachable):
            worker = st.workers.get(ev.worker_id)
            if worker is not None and worker.reachable:
                worker.reachable = False  # out of the free index until heard from again
        elif isinstance(ev, Heartbeat):
            self._seen(ev.worker_id)
        elif isinstance(ev, Tick):
            self._tick()
        else:  # an Update or SetWindows: the Event union is closed
            st.actions.extend(operator_event(st, ev))

    # ---- submissions

    def _submit(
        self,
        m: JobManifest,
        provenance: tuple[tuple[str, str], ...],
        user: str = UNKNOWN_USER,
        parent: int | None = None,
    ) -> Job:
        st, cfg = self._st, self.config
        children = st.children.get(parent, 0) if parent is not None else 0
        if parent is not None and children >= cfg.max_child_jobs:
            raise SchedulerError(
                f"job {parent} has submitted {children} child jobs, the limit "
                "([jobs] max_child_jobs); wait for some to end or raise the limit"
            )
        queue = cfg.queue(m.queue)
        if queue is None:
            raise SchedulerError(
                f"--queue {m.queue!r}: unknown queue; queues: {', '.join(cfg.queue_names)}"
            )
        limit = m.time_limit or queue.default_time_limit or queue.max_time_limit
        if queue.max_time_limit is not None and limit is not None and limit > queue.max_time_limit:
            raise SchedulerError(
                f"--time {format_duration(limit)}: above queue {queue.name}'s limit of "
                f"{format_duration(queue.max_time_limit)}; ask for less or use another queue"
            )
        refuse_without_runtime(m, st.workers.values())
        preempt.check_submit(cfg, m)
        pin_refusal = refusal(m, st.workers.values())
        if pin_refusal is not None:
            raise SchedulerError(pin_refusal)
        if m.array is not None and m.array.size > cfg.max_array_size:
            raise SchedulerError(
                f"--array {m.array}: {m.array.size} tasks exceed the limit of {cfg.max_array_size}"
            )
        for dep in m.dependencies:
            if not known(st, dep.job_id):
                raise SchedulerError(f"--deps {dep}: unknown job id {dep.job_id}")
        self._check_fits(m)
        job = Job(st.next_id, m, tuple(sorted(provenance)), limit, st.now)
        job.user, job.parent = user, parent
        if parent is not None:
            st.children[parent] = children + 1
        st.next_id += 1
        st.jobs[job.id] = job
        st.unfinished += 1
        st.touch(job)
        lc.admit(st, job)
        return job

    def _check_fits(self, m: JobManifest) -> None:
        if not self._st.workers:
            return  # no worker has registered yet; the job waits for one
        res, lo = m.resources, m.node_range[0]
        if self._st.known_capable_count(res) >= lo:
            return
        from rbs.units import format_cpu, human_size

        workers = list(self._st.workers.values())
        largest = max(workers, key=lambda w: (len(w.gpus), w.cpu_millis, w.memory_bytes))
        ask = (
            f"cpu {format_cpu(res.cpu_millis)}, memory {human_size(res.memory_bytes)}, "
            f"gpus {res.gpus}" + (f" on each of {lo} nodes" if lo > 1 else "")
        )
        raise SchedulerError(
            f"no worker can ever run this job: it asks for {ask}; the largest worker is "
            f"{largest.size_text()} ({len(workers)} workers known). Lower --cpus/--memory-gb/"
            "--gpus/--nodes or add a bigger worker"
        )

    # ---- cancels and requeues

    def _check_targets(self, targets: Iterable[TaskRef]) -> None:
        for t in targets:
            job = self._st.jobs.get(t.job_id)
            if job is None and t.job_id in self._st.ended:
                continue  # ended and forgotten: a cancel or requeue has nothing to do
            if job is None:
                raise SchedulerError(f"unknown job id {t}")
            if t.index is not None:
                if job.manifest.array is None:
                    raise SchedulerError(
                        f"job {t.job_id} is not an array; address it as {t.job_id}"
                    )
                if not job.pool.contains(t.index):
                    raise SchedulerError(
                        f"job {t.job_id} has no array task {t.index} (its array is {job.manifest.array})"
                    )

    def _runs_of(self, target: TaskRef) -> list[Run]:
        job = self._st.jobs.get(target.job_id)
        if job is None or target.index is None:
            return list(job.runs.values()) if job else []
        run = job.runs.get(target.index)
        return [run] if run is not None else []

    def _cancel(self, target: TaskRef, by: str = UNKNOWN_USER) -> None:
        st = self._st
        job = st.jobs.get(target.job_id)
        if job is None or job.state.terminal:
            return
        action = "cancel" if target.index is None else f"cancel {target}"
        change = JobChange(action=action, by=by, at=st.now)
        job.changes = (*job.changes, change)[-MAX_CHANGES:]
        st.touch(job)
        if target.index is None:
            job.pool.cancel_all()
        else:
            job.pool.cancel_index(target.index)  # False when it runs or ended: handled below
        for run in self._runs_of(target):
            lc.stop_run(st, run, KillReason.CANCEL)
        lc.sync_ready(st, job)
        job.reason = None if job.runs or job.pool.pending else endings.cancelled_by(by)
        if st.refresh(job).terminal:
            lc.on_terminal(st, job)
        st.need_pass = True

    # ---- task and worker reports

    def _seen(self, worker_id: str) -> None:
        # Any report from a live worker counts as a heartbeat.
        worker = self._st.workers.get(worker_id)
        if worker is not None and worker.alive:
            worker.last_seen = self._st.now
            if not worker.reachable:
                worker.reachable = True
                self._st.need_pass = True

    def _started(self, ev: TaskStarted) -> None:
        st = self._st
        r = ev.run
        self._seen(ev.worker_id)
        job = st.jobs.get(r.job_id)
        run = job.runs.get(Job.raw_of(r.index)) if job else None
        if job is None or run is None or run.attempt != r.attempt or run.confirmed_time is not None:
            return  # stale or repeated report
        run.confirmed_time = st.now
        if job.time_limit is not None:
            run.deadline = st.now + job.time_limit
            st.push_deadline(job, run)
            st.sync_release(run)
        st.touch_run(run)

    def _exited(self, ev: TaskExited) -> None:
        st = self._st
        r = ev.run
        self._seen(ev.worker_id)
        run = lc.find_run(st, r.job_id, r.index, r.attempt)
        if run is None or r.rank >= len(run.nodes):
            log.debug("ignoring exit of unknown run %s", r.lease_id)
            return
        node = run.nodes[r.rank]
        if node.exited or node.worker_id != ev.worker_id:
            return
        job = st.jobs[r.job_id]
        if job.runs.get(job.raw_of(r.index)) is run:
            lc.node_exited(
                st, job, run, r.rank, ev.exit_code, ev.signal, ev.oom, ev.peak_memory_bytes
            )
        else:
            lc.release_node(st, run, r.rank)
            lc.settle_draining(st, run)

    def _worker_up(self, ev: WorkerUp) -> None:
        st = self._st
        rec = WorkerRecord.of(ev, self.config.default_master_ports)
        # Reconcile: what we placed there but it no longer has was lost; what it runs
        # that we did not place (or no longer want) is killed, never run twice.
        held = {(r.job_id, r.index, r.attempt, r.rank) for r in ev.running}
        held |= {(f.run.job_id, f.run.index, f.run.attempt, f.run.rank) for f in ev.finished}
        worker = st.workers.get(ev.worker_id)
        if worker is None:
            worker = WorkerCapacity(rec, st.now)
            st.add_worker(worker)
        else:
            self._check_shrink([n for k, n in worker.allocs.items() if k in held], rec)
            for key in list(worker.allocs):
                if key not in held:
                    run = lc.find_run(st, key[0], key[1], key[2])
                    if run is not None:
                        lc.node_lost(st, run, key[3])
                    else:
                        worker.release(key)
            st.count_worker(worker, -1, known=True)
            worker.reconfigure(rec)
            st.count_worker(worker, 1, known=True)
        worker.last_seen = st.now
        worker.reachable = True
        st.watch(worker)
        st.dirty_workers[worker.worker_id] = worker
        st.need_pass = True
        for ref in ev.running:
            if (ref.job_id, ref.index, ref.attempt, ref.rank) not in worker.allocs:
                st.actions.append(
                    Kill(run=ref, worker_id=worker.worker_id, reason=KillReason.ORPHAN)
                )
        for exited in ev.finished:
            self._exited(exited)

    def _check_shrink(self, nodes: list[NodeRecord], rec: WorkerRecord) -> None:
        if (
            sum(n.cpu_millis for n in nodes) > rec.cpu_millis
            or sum(n.memory_bytes for n in nodes) > rec.memory_bytes
            or len(nodes) > rec.job_slots
            or not {g for n in nodes for g in n.gpus} <= set(rec.gpus)
        ):
            raise SchedulerError(
                f"worker {rec.worker_id} re-registered with less than its running jobs hold; "
                "drain it (rbs remote drain) before changing its resources"
            )

    def _tick(self) -> None:
        st = self._st
        now = st.now
        for worker in st.silent_workers(self.config.heartbeat_timeout):
            lc.worker_lost(st, worker)
        while st.deadlines and st.deadlines[0][0] <= now:
            deadline, job_id, raw, attempt = heapq.heappop(st.deadlines)
            held = st.jobs.get(job_id)
            run = held.runs.get(raw) if held else None
            if run is not None and run.attempt == attempt and run.deadline == deadline:
                lc.stop_run(st, run, KillReason.TIMEOUT)
        while st.begin_heap and st.begin_heap[0][0] <= now:
            _, job_id = heapq.heappop(st.begin_heap)
            job = st.jobs.get(job_id)
            if job is not None and not job.state.terminal and job.reason == "BeginTime":
                job.eligible_time = now
                st.touch(job)
                lc.sync_ready(st, job)
        lc.expire_deadlines(st)
        lapse_due(st)  # a preemptor's hold whose bound passed opens its workers again

    # ---- persistence

    def snapshot(self) -> Snapshot:
        st = self._st
        runs = [r for j in st.jobs.values() for r in j.runs.values()] + list(st.draining.values())
        return Snapshot(
            jobs=tuple(j.record() for j in sorted(st.jobs.values(), key=lambda j: j.id)),
            tasks=tuple(
                sorted(
                    (r.record() for r in runs), key=lambda t: (t.job_id, t.index or 0, t.attempt)
                )
            ),
            workers=tuple(st.workers[w].record() for w in sorted(st.workers)),
            ended=tuple(st.ended.items()),
        )

    @classmethod
    def restore(
        cls,
        config: SchedulerConfig | None,
        *,
        jobs: Iterable[JobRecord],
        tasks: Iterable[TaskRecord],
        workers: Iterable[WorkerRecord],
        now: float,
        validate: bool | None = None,
        ended: Iterable[tuple[int, JobState, int | None]] = (),
        forget_ended: bool = False,
    ) -> Scheduler:
        """Rebuild a scheduler from journal rows (active task rows suffice): see
        rbs/scheduler/restoring.py. `ended` holds (job id, final state, parent) of the
        ended jobs to keep as their final state only (`forget_ended`)."""
        sched = cls(config, validate=validate, forget_ended=forget_ended)
        restoring.fill(sched._st, jobs=jobs, tasks=tasks, workers=workers, ended=ended, now=now)
        if forget_ended:  # ended jobs loaded for an attempt still stopping: theirs to go
            sched._st.ended.waiting.update(j.id for j in sched._st.jobs.values())
        if sched.validate:
            check_invariants(sched._st)
        return sched

    # ---- views

    def holds(self, run: RunRef, worker_id: str) -> bool:
        """Whether `run` is live on `worker_id`: its task's current attempt (or one being
        stopped), that rank placed there and not yet exited. A report of any other run
        speaks for an attempt given up, which is fenced off (docs/design/runs.md)."""
        found = lc.find_run(self._st, run.job_id, run.index, run.attempt)
        if found is None or not 0 <= run.rank < len(found.nodes):
            return False
        node = found.nodes[run.rank]
        return node.worker_id == worker_id and not node.exited

    def run_user(self, run: RunRef) -> str | None:
        """Who submitted `run`'s job while that rank of that attempt has not exited, else
        None: a run's scoped token is good exactly that long (docs/design/security.md)."""
        found = lc.find_run(self._st, run.job_id, run.index, run.attempt)
        if found is None or not 0 <= run.rank < len(found.nodes) or found.nodes[run.rank].exited:
            return None
        return self._st.jobs[run.job_id].user

    def job(self, job_id: int) -> JobView:
        job = self._st.jobs.get(job_id)
        if job is None:
            raise SchedulerError(f"unknown job id {job_id}")
        return job_view(self._st, job)

    def task(self, job_id: int, index: int) -> TaskView:
        """One array task's live state (None once finished: see the journal)."""
        job = self._st.jobs.get(job_id)
        if job is None:
            raise SchedulerError(f"unknown job id {job_id}")
        if job.manifest.array is None or not job.pool.contains(index):
            raise SchedulerError(f"job {job_id} has no array task {index}")
        return task_view(self._st, job, index)

    def job_ids(self) -> list[int]:
        """The jobs the core holds (not those ended and forgotten: see `job_states`)."""
        return sorted(self._st.jobs)

    def job_states(self) -> dict[int, JobState]:
        """Every job's state, those ended and forgotten included."""
        return dict(self._st.ended.items()) | {j.id: j.state for j in self._st.jobs.values()}

    def queues(self) -> list[QueueView]:
        return queue_views(self._st)

    def has_unfinished_jobs(self) -> bool:
        """Whether any job is not yet in a terminal state (a count kept as jobs end)."""
        return self._st.unfinished > 0

    @property
    def work(self) -> Work:
        """The core's operation counters (what decisions cost, counted, never timed)."""
        return self._st.work
