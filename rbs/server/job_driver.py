"""The job scheduler's driver: feeds the pure core events, journals, and acts.

One asyncio task owns the `Scheduler`. Everything that happens (a submission, a
cancel, a worker connecting or lost, a job starting or ending, the clock) becomes an
event on its queue. The task drains the queue in batches, calls `handle_many`, writes
every Save* instruction to SQLite in one transaction, and only then answers clients
and sends job leases and kills down the worker streams. Nothing is acknowledged
before it is committed to the journal (WAL; with `[jobs] durable = true` each commit
also waits for an fsync, one for a whole burst of submissions), so a killed server
loses no acknowledged job, and because a run is journaled before its lease is sent,
none is started twice. A step whose write fails (disk full) changes nothing: its clients
get the error, the workers' reports of it are fed again with the next step, and log
lines and results wait, unacknowledged, until they can be stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rbs.model import UNKNOWN_USER, JobManifest, JobState, KillReason
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.dispatch import ConnectionState
from rbs.scheduler.dispatch_events import WorkerInfo
from rbs.scheduler.events import (
    Cancel,
    Event,
    Heartbeat,
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
    Kill,
    Rejected,
    SaveJob,
    SaveTask,
    SaveWorker,
    Start,
)
from rbs.scheduler.state import SchedulerError
from rbs.scheduler.store import Store
from rbs.scheduler.views import JobView
from rbs.server.interning import Interner
from rbs.server.job_errors import JobRequestError as JobRequestError
from rbs.server.job_logs import JobLogs
from rbs.server.job_outputs import JobOutputs
from rbs.server.job_records import record_view
from rbs.server.log_intake import LogIntake
from rbs.server.workers_service import WorkerHub
from rbs.wire.errors import StorageFull
from rbs.wire.workers_jobs import (
    JobFinishedReport,
    JobLeaseInfo,
    JobReport,
    JobStartedReport,
    KillOrder,
    LogBatch,
    OutputReport,
    ResultAck,
)

log = logging.getLogger(__name__)

TICK_S = 0.25
# After a step whose journal write failed (disk full), the next try waits this long,
# doubling up to the maximum, so a full disk costs a rebuild of the core now and then.
RETRY_S = 0.25
RETRY_MAX_S = 2.0
# Retried after a failed write: workers' reports (clients get the error and retry).
_HELD_EVENTS = (TaskStarted, TaskExited, WorkerUp, WorkerDown, WorkerUnreachable)


class JobDriver:
    """Owns the scheduler; implements the hub's JobEvents; serves the jobs API's calls."""

    def __init__(
        self,
        data_dir: Path,
        config: SchedulerConfig,
        hub: WorkerHub,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.hub = hub
        self._clock = clock
        self.store = Store(data_dir / "jobs.db", durable=config.durable)
        # Ended jobs leave the core (rbs/scheduler/compaction.py); `view` reads them back.
        self.sched: Scheduler = self.store.restore(config, clock(), forget_ended=True)
        self.logs = JobLogs(data_dir / "job_logs.db")
        self.intake = LogIntake(self.logs, hub.send)
        self._out_db = sqlite3.connect(
            data_dir / "job_outputs.db", isolation_level=None, check_same_thread=False
        )
        self._out_db.execute("PRAGMA journal_mode=WAL")
        self.outputs = JobOutputs(self._out_db)
        self._queue: asyncio.Queue[tuple[Event, asyncio.Future[Any] | None]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._states: dict[int, JobState] = self.sched.job_states()
        self._slots: dict[str, set[str]] = {}  # worker -> active lease ids
        self._leases: dict[str, Start] = {}
        # Journal-full handling (see docs/design/scheduler.md, "Persistence"): reports
        # to retry, results not yet stored, and submit request ids.
        self._held: list[tuple[Event, asyncio.Future[Any] | None]] = []
        self._held_finished: list[tuple[str, JobFinishedReport]] = []
        self._finished_waiting = False
        self._journal_error: str | None = None
        self._shared = Interner()  # equal provenance tuples kept once (rbs/server/interning.py)
        self._request_of: dict[str, str] = {}  # Submit event id -> request id
        self._submitting: dict[str, asyncio.Future[Any]] = {}  # request id -> its answer
        self._heard: dict[str, float] = {}  # worker -> the hub's last_heartbeat relayed
        # What each run's environment gets besides the core's: RBS_REMOTE and its scoped
        # token (rbs.server.tokens.run_env, set by the cluster).
        self.run_env: Callable[[str, JobManifest], tuple[tuple[str, str], ...]] = lambda i, m: ()
        self.observe: Callable[[list[Any], float], None] = lambda instructions, seconds: None
        self.on_output: Callable[[OutputReport], None] = lambda report: None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run())
        self._ticker = loop.create_task(self._tick())

    async def stop(self) -> None:
        for t in (self._ticker, self._task):
            if t is not None:
                t.cancel()
        await asyncio.gather(*(t for t in (self._ticker, self._task) if t), return_exceptions=True)
        self.store.close()
        self.logs.close()
        self._out_db.close()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self._relay_heartbeats()
            self._post(Tick())
            self._retry_reports()

    def _relay_heartbeats(self) -> None:
        """Tell the core of each worker the hub heard from since the last tick.

        Only what was heard counts: an open stream is no proof of life (a frozen worker
        keeps its connection), so `[jobs] heartbeat_timeout` holds for every kind of
        silence, whatever the hub's own, longer, timeout for build actions."""
        for view in self.hub.workers():
            wid = view.info.worker_id
            if view.state is not ConnectionState.CONNECTED or not view.info.job_slots:
                continue
            if self._heard.get(wid) != view.last_heartbeat:
                self._heard[wid] = view.last_heartbeat
                self._post(Heartbeat(worker_id=wid))

    def _ack_results(self, batch: list[tuple[Event, asyncio.Future[Any] | None]]) -> None:
        """The step that took these exits is journaled: their workers may forget them."""
        for event, _ in batch:
            if isinstance(event, TaskExited):
                self.hub.send(event.worker_id, ResultAck(lease_id=event.run.lease_id))

    def _worker_saved(self, ins: SaveWorker) -> None:
        if not ins.record.alive:
            # Given up while its stream may still be open (frozen): close it, so that
            # awake it registers afresh and its runs given away meanwhile are stopped.
            self._heard.pop(ins.record.worker_id, None)
            self.hub.drop(ins.record.worker_id)

    def _post(self, event: Event, future: asyncio.Future[Any] | None = None) -> None:
        self._queue.put_nowait((event, future))

    async def _call(self, event: Event) -> Any:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._post(event, fut)
        return await fut

    async def _run(self) -> None:
        delay = RETRY_S
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < 2000:
                batch.append(self._queue.get_nowait())
            if self._held:  # merged here, not in `_step`: a failed step must hold them again
                batch, self._held = self._held + batch, []
            try:
                self._step(batch)
            except Exception as e:
                self._step_failed(batch, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
            else:
                delay = RETRY_S

    def _step_failed(
        self, batch: list[tuple[Event, asyncio.Future[Any] | None]], e: Exception
    ) -> None:
        """The step changed nothing (Store.step rebuilt the core): answer the clients with
        the error, keep the workers' reports for the next step."""
        if isinstance(e, StorageFull):
            if self._journal_error is None:
                log.error("%s; jobs wait until then", e)
            self._journal_error = str(e)
            err: Exception = e
        else:
            log.exception("scheduler step failed")
            err = JobRequestError(f"internal scheduler error: {e}", "INTERNAL")
        for event, fut in batch:
            self._request_of.pop(event.event_id, None)
            if fut is not None:
                if not fut.done():
                    fut.set_exception(err)
            elif isinstance(event, _HELD_EVENTS) and isinstance(e, StorageFull | sqlite3.Error):
                # Only on a journal failure: an event the core raised on fails every step.
                self._held.append((event, None))

    def _step(self, batch: list[tuple[Event, asyncio.Future[Any] | None]]) -> None:
        now, started = self._clock(), time.perf_counter()
        # Atomic with its journal write: durable before anything is answered or sent.
        instructions = self.store.step(
            self.sched, [e for e, _ in batch], now, request_ids=self._request_of
        )
        self._ack_results(batch)
        self.logs.note_all(instructions, now)  # the scheduler's `Note`s, as sys lines
        if self._journal_error is not None and any(
            isinstance(i, SaveJob | SaveTask | SaveWorker) for i in instructions
        ):
            log.warning("the job journal is written again (%s before)", self._journal_error)
            self._journal_error = None
        if self._request_of:  # journaled with their jobs (Store.request_job finds them)
            for e, _ in batch:
                self._request_of.pop(e.event_id, None)
        self.observe(instructions, time.perf_counter() - started)  # rbs.server.metrics
        futures = {e.event_id: f for e, f in batch if f is not None}
        for ins in instructions:
            if isinstance(ins, Accepted):
                fut = futures.pop(ins.event_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(ins.job_id)
            elif isinstance(ins, Rejected):
                fut = futures.pop(ins.event_id, None)
                if fut is not None and not fut.done():
                    fut.set_exception(JobRequestError(ins.message))
                elif fut is None:
                    # A worker's registration or report nobody waits on: say it in the log.
                    log.warning("scheduler refused event %s: %s", ins.event_id, ins.message)
            elif isinstance(ins, Start):
                self._send_start(ins)
            elif isinstance(ins, Kill):
                self._send_kill(ins)
            elif isinstance(ins, SaveJob):
                rec = ins.record
                if self._states.get(rec.job_id) is not rec.state:
                    self._states[rec.job_id] = rec.state
                    self.logs.state_changed(rec.job_id, rec.state.terminal)
            elif isinstance(ins, SaveWorker):
                self._worker_saved(ins)
            elif isinstance(ins, SaveTask) and not ins.record.active:
                t = ins.record
                for node in t.nodes:
                    run = RunRef(job_id=t.job_id, index=t.index, attempt=t.attempt, rank=node.rank)
                    self._slots.get(node.worker_id, set()).discard(run.lease_id)
                    self._leases.pop(run.lease_id, None)
        for fut in futures.values():  # events with no answer of their own (cancel)
            if not fut.done():
                fut.set_result(None)

    def _send_start(self, ins: Start) -> None:
        m = ins.manifest
        if ins.time_limit != m.time_limit:
            m = dataclasses.replace(m, time_limit=ins.time_limit)
        ckpt = None
        if m.checkpoint_dir and ins.run.attempt > 1:
            ckpt = self.outputs.checkpoint(ins.run.job_id, ins.run.index)
        lease = JobLeaseInfo(
            lease_id=ins.lease_id,
            job_id=str(ins.run.job_id),
            manifest=m,
            task_index=-1 if ins.run.index is None else ins.run.index,
            attempt=ins.run.attempt,
            gpu_ids=ins.gpus,
            env=ins.env + self.run_env(ins.lease_id, m),
            node_rank=ins.run.rank,
            nodelist=ins.nodelist,
            master_addr=ins.master_addr,
            master_port=ins.master_port or 0,
            input_root=m.input_root,
            checkpoint=ckpt,
        )
        self._slots.setdefault(ins.worker_id, set()).add(ins.lease_id)
        self._leases[ins.lease_id] = ins
        if not self.hub.send(ins.worker_id, lease):
            # Not connected right now: the core sees the worker lost (or back) shortly.
            log.warning(
                "worker %s is not connected; job lease %s waits for it", ins.worker_id, ins.lease_id
            )

    def _send_kill(self, ins: Kill) -> None:
        kill = KillOrder(
            lease_id=ins.run.lease_id, job_id=str(ins.run.job_id), reason=ins.reason.value
        )
        self.hub.send(ins.worker_id, kill)

    # ------------------------------------------------------------------ JobEvents (hub)

    def worker_connected(self, info: WorkerInfo, held_job_leases: tuple[str, ...]) -> None:
        if info.job_slots <= 0:
            return
        running = []
        for lease_id in held_job_leases:
            try:
                running.append(RunRef.parse_lease(lease_id))
            except ValueError:
                log.warning("worker %s holds an unreadable job lease %r", info.worker_id, lease_id)
        self._post(
            WorkerUp(
                worker_id=info.worker_id,
                hostname=info.hostname or info.name,
                address=info.address or info.hostname,
                cpu_millis=max(1, info.cpus) * 1000,
                memory_bytes=max(1, info.memory_bytes),
                gpus=tuple(info.gpu_ids),
                job_slots=info.job_slots,
                master_ports=None,
                container_runtimes=tuple(info.container_runtimes),
                running=tuple(running),
            )
        )

    def worker_lost(self, worker_id: str) -> None:
        """The hub gave the worker up (its build-action timeouts): its runs may live on to
        the end of their lease, so the core only stops placing new runs there."""
        self._post(WorkerUnreachable(worker_id=worker_id))

    async def job_message(self, worker_id: str, report: JobReport) -> None:
        if isinstance(report, JobStartedReport):
            run = RunRef.parse_lease(report.lease_id)
            if not self._fenced(worker_id, run):
                self._post(TaskStarted(run=run, worker_id=worker_id))
        elif isinstance(report, JobFinishedReport):
            self._held_finished.append((worker_id, report))
            self._retry_finished()
        elif isinstance(report, LogBatch):
            self.intake.add(worker_id, self._own_lines(worker_id, report))
        else:  # a --pty run's raw output, for the attached clients (rbs.server.job_attach)
            self.on_output(report)

    def _fenced(self, worker_id: str, run: RunRef) -> bool:
        """Whether a report speaks for a run that is not live on its worker (an attempt
        given up, or a rank placed elsewhere): if so its worker is told, on this stream,
        to stop it, instead of waiting for its next registration to do so."""
        if self.sched.holds(run, worker_id):
            return False
        log.info("worker %s reported %s, which is not live: killed", worker_id, run.lease_id)
        kill = KillOrder(
            lease_id=run.lease_id, job_id=str(run.job_id), reason=KillReason.ORPHAN.value
        )
        self.hub.send(worker_id, kill)
        return True

    def _own_lines(self, worker_id: str, batch: LogBatch) -> LogBatch:
        """A batch's lines are its lease's run's, whatever else it says, so a stale run's
        lines are kept under their own attempt, never the live one's."""
        if not batch.lease_id:  # none from a worker of an older protocol, which is refused
            return batch
        run = RunRef.parse_lease(batch.lease_id)
        self._fenced(worker_id, run)
        own = (run.index, run.attempt, run.rank)
        if all((x.task, x.attempt, x.rank) == own for x in batch.lines):
            return batch
        lines = tuple(
            dataclasses.replace(x, task=run.index, attempt=run.attempt, rank=run.rank)
            for x in batch.lines
        )
        return dataclasses.replace(batch, lines=lines)

    # ------------------------------------------------------------------ held reports

    def _retry_reports(self) -> None:
        if self._held_finished:
            self._retry_finished()
        self.intake.retry()

    def _retry_finished(self) -> None:
        """Record results' outputs, in order, and hand their exits to the core; one the
        outputs table cannot take (disk full) waits with those after it."""
        while self._held_finished:
            worker_id, fin = self._held_finished[0]
            run = RunRef.parse_lease(fin.lease_id)
            if self._fenced(worker_id, run):
                # Refused before it records anything; its worker may forget it.
                self._held_finished.pop(0)
                self.hub.send(worker_id, ResultAck(lease_id=fin.lease_id))
                continue
            # In a gang, rank 0 drives: its outputs and checkpoint are the job's. The
            # other ranks are stopped after it ends and would overwrite them.
            lead = run.rank == 0
            try:
                if lead and fin.output_tree is not None:
                    self.outputs.record(run, fin.output_tree)
                if lead and fin.checkpoint_tree is not None:
                    self.outputs.record_checkpoint(run, fin.checkpoint_tree)
            except sqlite3.Error as e:
                if not self._finished_waiting:
                    log.warning("lease %s: its outputs wait to be recorded: %s", fin.lease_id, e)
                self._finished_waiting = True
                return
            self._finished_waiting = False
            self._held_finished.pop(0)
            self._post(
                TaskExited(
                    run=run,
                    worker_id=worker_id,
                    exit_code=fin.exit_code,
                    signal=fin.signal or None,
                    oom=fin.oom_killed,
                    peak_memory_bytes=fin.peak_memory_bytes or None,
                )
            )

    def job_counts(self) -> Mapping[str, int]:
        counts: dict[str, int] = {}
        for state in self._states.values():
            counts[state.value] = counts.get(state.value, 0) + 1
        return counts

    def job_slots_used(self, worker_id: str) -> int:
        return len(self._slots.get(worker_id, ()))

    # ------------------------------------------------------------------ client calls

    async def submit(
        self,
        manifest: JobManifest,
        provenance: Mapping[str, str],
        request_id: str | None = None,
        owner: tuple[str, int | None] = (UNKNOWN_USER, None),
    ) -> int:
        """Submit a job; a `request_id` seen before (journaled: across restarts) answers its job."""
        if request_id is not None:
            known = self.store.request_job(request_id)
            if known is not None:
                return known
            inflight = self._submitting.get(request_id)
            if inflight is not None:
                job_id: int = await asyncio.shield(inflight)
                return job_id
        manifest, prov = self._shared.submission(manifest, provenance)  # owner: user, parent
        self.hub.images.check(manifest.container, self.hub.workers())  # an unknown image
        event = Submit(manifest=manifest, provenance=prov, user=owner[0], parent=owner[1])
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if request_id is not None:
            self._request_of[event.event_id] = request_id
            self._submitting[request_id] = fut
        self._post(event, fut)
        try:
            job_id = await asyncio.shield(fut)
        finally:
            if request_id is not None and self._submitting.get(request_id) is fut:
                del self._submitting[request_id]
        return job_id

    async def cancel(self, targets: list[TaskRef], by: str = UNKNOWN_USER) -> None:
        await self._call(Cancel(targets=tuple(targets), by=by))

    def view(self, job_id: int) -> JobView:
        """The core's view, or for a job it no longer holds, the journal's (job_records)."""
        try:
            return self.sched.job(job_id)
        except SchedulerError as e:
            rec = self.store.job_record(job_id)
            if rec is None:
                raise JobRequestError(str(e), "NOT_FOUND") from None
        return record_view(self.config, rec, self.state_of, self._clock())

    def states(self) -> list[tuple[int, JobState]]:
        """Every job's id and current state, in id order."""
        return sorted(self._states.items())

    def state_of(self, job_id: int) -> JobState:
        state = self._states.get(job_id)
        if state is None:
            raise JobRequestError(
                f"unknown job id {job_id}; see `rbs job list --history`", "NOT_FOUND"
            )
        return state
