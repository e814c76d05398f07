"""The worker's job host: runs the job leases the scheduler sends, in job slots.

The worker daemon hands every JobLease, KillJob, JobInput and Ack it receives to `handle()`.
A lease becomes a run: on a thread (`jobrun.prepare`) its folder is made and its input tree
(and checkpoint, on a retry) copied out of the CAS; then the run supervisor (one process per
worker, `rbs.executor.supervisor`, reached through `supervisor_client`) starts the process
with the lease's environment and the manifest's cpu and memory limits, and sends its numbered
log lines, shipped as they come (`jobship`). When the process ends, whatever the reason, the
declared outputs and the checkpoint folder are stored as trees (`jobrun.finish`), the last log
lines are queued, and only then JobFinished, so a follower of the log sees every line first.

The scheduler owns time limits and final states: a KillJob(reason="timeout") ends the
run, and the scheduler maps its own kill reasons to TIMEOUT, CANCELLED or PREEMPTED.
JobStarted goes out only for a run still alive shortly after its start (`StartReports`).

Across a broken stream: runs carry on; their lease ids, and those of runs whose JobFinished
is not acknowledged (ResultAck) yet, are in the next Register (`held_leases`), so the
scheduler keeps them here; `on_connected` then re-sends every unacknowledged log line and
the held JobFinished messages. A JobFinished is delivered once the server acknowledges it,
after the journal commit that took it; the run's folder and spool go then.

Across a daemon restart: the supervisor holds the runs, so a daemon stopped with
`leave_running` (or killed) leaves them going; the next daemon connects to it (`start`),
lists its runs, holds them in its first Register as the same attempts, re-ships their
lines from the last acknowledged seq and reports the exits it missed. A daemon finding
no supervisor starts one, which sweeps what a dead one left (the scheduler requeues it).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rbs.cas.store import BlobStore
from rbs.executor import jobfiles
from rbs.executor.cgroup_base import CgroupBackend
from rbs.executor.jobfiles import RunDirs
from rbs.executor.joblog import LogSink, LogSpool, LogSpoolError, line_of
from rbs.executor.jobrun import (
    START_FAILED_EXIT,
    HostSetup,
    LeaseRun,
    RunResult,
    finish,
    finished,
    input_message,
    kill_request,
    prepare,
    reattach,
    report,
)
from rbs.executor.jobship import LogShipper, StartReports, output_report, thread_sink
from rbs.executor.jobslots import JobSlots
from rbs.executor.runfolders import RunFolders
from rbs.executor.runuser import RunUsers
from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import (
    Exited,
    Forget,
    KillRun,
    Lines,
    Message,
    Renew,
    RunInfo,
    Shutdown,
    Started,
    StartRun,
)
from rbs.model import Digest, JobState, KillReason, LogLine, LogStream
from rbs.wire.workers_jobs import (
    InputOrder,
    JobFinishedReport,
    JobLeaseInfo,
    JobOrder,
    JobReport,
    KillOrder,
    LogAck,
    ResultAck,
)

log = logging.getLogger(__name__)

# Seconds between SIGTERM and SIGKILL when a job is killed (cancel, timeout, shutdown).
DEFAULT_GRACE_S = 10.0
# How many reported runs to remember in case their JobFinished comes back unsent
# (more than a worker's outbox ever holds between two writes).
FORGOTTEN_KEPT = 1000
_SAFE_LEASE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


class JobHost:
    """Runs job leases on one worker; see the module docstring."""

    def __init__(
        self,
        *,
        work_dir: Path,
        store: BlobStore,
        send: Callable[[JobReport], None],
        connected: Callable[[], bool],
        slots: int,
        hostname: str,
        backend: CgroupBackend,
        scope: str = "default",
        prefetch: Callable[[Digest], None] | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        env: Mapping[str, str] | None = None,
        users: RunUsers | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a job host needs at least one job slot, got {slots}")
        self.root = work_dir / "jobs"
        self.backend = backend  # the kind the supervisor detects too
        self.slots = slots
        # Pooled, for inputs and outputs only: a job with neither needs no thread at all.
        self._threads = ThreadPoolExecutor(slots + 2, thread_name_prefix="rbs-job")
        # Done runs' folders, emptied for the next runs (not under uids of their own).
        self._folders = RunFolders(
            self.root, self._threads, keep=2 * slots + 16, reuse=users is None
        )
        self.setup = HostSetup(
            store=store,
            hostname=hostname,
            grace_s=grace_s,
            # The daemon's own variables, read once: a job inherits a few (jobfiles).
            env=env if env is not None else jobfiles.inherited(os.environ),
            prefetch=prefetch,
            users=users,
            folders=self._folders,
        )
        # The supervisor detects the same kind of cgroup backend the daemon did.
        self.supervisor = SupervisorClient(
            work_dir,
            cgroups=backend.name,
            scope=scope,
            hostname=hostname,
            on_event=self._on_event,
            on_lost=self._on_lost,
        )
        self._started: asyncio.Future[None] | None = None
        self._restart: asyncio.Task[None] | None = None
        self._send = send
        self._connected = connected
        self._runs: dict[str, LeaseRun] = {}
        # Forgotten runs whose JobFinished may still sit in the worker's outbox: if the
        # stream breaks before it is written, `unsent` brings the run back.
        self._forgotten: collections.OrderedDict[str, LeaseRun] = collections.OrderedDict()
        self._slots = JobSlots(slots)
        self._stopping = False
        self._starts = StartReports(send)
        self._acked: dict[str, int] = {}  # log acks the supervisor has not been told of
        self._lease = (0.0, 0.0)  # until, grace: the last renewal

    # ------------------------------------------------------------------ the supervisor

    async def start(self) -> None:
        """Connect to the supervisor (re-attaching to its runs) or start a fresh one."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            try:
                await self._connect()
            except BaseException as e:
                self._started.set_exception(e)
                raise
            self._started.set_result(None)
        await self._started

    async def _connect(self) -> None:
        attached = await self.supervisor.connect()
        if not attached:
            if not self._runs:  # the fresh supervisor killed what was left there
                jobfiles.remove(self.root)
                self._folders.reset()
            self.root.mkdir(mode=0o711, parents=True, exist_ok=True)  # runs list nothing
            return
        self._folders.adopt()  # the free folders the previous daemon left
        runs = (await self.supervisor.list_runs()).runs
        for info in runs:
            self._attach(info)
        if runs:
            log.info("re-attached to %d run(s) the run supervisor held", len(runs))
        if self._lease[0] > 0:
            self.renew(*self._lease)

    def _attach(self, info: RunInfo) -> None:
        run = reattach(info, self.root, self._send, self._connected)
        if run is None:
            return
        self._slots.hold()
        self._runs[run.lease_id] = run
        run.task = asyncio.create_task(self._conclude(run), name=f"job-{run.lease_id}")

    def renew(self, until: float, grace: float) -> None:
        """The lease now ends at `until` (monotonic); the supervisor enforces it."""
        self._lease = (until, grace)
        if self.supervisor.connected:
            acked, self._acked = self._acked, {}
            self.supervisor.send(Renew(until=until, grace_s=grace, acked=acked))

    def _on_event(self, msg: Message) -> None:
        run = self._runs.get(getattr(msg, "lease_id", ""))
        if run is None:
            return
        if isinstance(msg, Lines | Started | Exited) and msg.records:  # before the event
            self._on_lines(run, [line_of(r) for r in msg.records])
        if isinstance(msg, Started):
            run.pid = msg.pid
            self._starts.add(run, msg.started_at)
            run.inputs.start(self.supervisor.send)  # what came before it
        elif isinstance(msg, Exited) and run.exited is not None and not run.exited.done():
            run.exited.set_result(msg)
        elif (raw := output_report(msg, run.raw, self._connected())) is not None:
            self._send(raw)  # a --pty run's terminal output, for the clients attached

    def _on_lost(self) -> None:
        """The supervisor is gone: its runs cannot be followed; a new one kills them."""
        self._started = None
        why = "the worker's run supervisor exited while the job ran"
        for run in self._runs.values():
            if run.live and run.exited is not None:
                self._reopen_spool(run)  # nobody else appends now
                self._sys(run, why)
                run.exited.set_result(Exited(lease_id=run.lease_id, state="FAILED", error=why))
        if not self._stopping:  # a fresh one at once: it kills what the lost one left
            self._restart = asyncio.get_running_loop().create_task(self.start())
            self._restart.add_done_callback(_log_failure)

    # ------------------------------------------------------------------ what the worker asks

    def slots_used(self) -> int:
        return self._slots.used

    def held_leases(self) -> list[str]:
        """Leases to list in Register.held_job_leases: running, or not yet reported."""
        return sorted(lid for lid, run in self._runs.items() if run.held)

    def on_connected(self) -> None:
        """A new stream is registered: re-send unacknowledged lines, then held results."""
        for run in list(self._runs.values()):
            if run.shipper is not None:
                run.shipper.rewind()
                try:
                    run.shipper.flush()
                except Exception:
                    # One run's log must not cost the stream (and every other run's report).
                    log.exception("lease %s: re-sending its log failed", run.lease_id)
            # Sent on the old stream perhaps, but not known journaled: again. The
            # server takes a repeated JobFinished once.
            if run.finished is not None and not run.finished_acked:
                self._send(run.finished)
                run.finished_sent = True
            self._maybe_forget(run)

    def unsent(self, report: JobFinishedReport) -> None:
        """The worker could not write this JobFinished to the stream: hold it again."""
        lease_id = report.lease_id
        run = self._runs.get(lease_id) or self._forgotten.pop(lease_id, None)
        if run is not None and run.finished is not None and not run.finished_acked:
            run.finished_sent = False
            self._runs[lease_id] = run

    async def handle(self, order: JobOrder) -> None:
        if isinstance(order, JobLeaseInfo):
            await self.start()
            self._accept(order)
        elif isinstance(order, KillOrder | InputOrder):
            self._kill(order)
        elif isinstance(order, LogAck):
            run = self._runs.get(order.lease_id)
            if run is not None and run.shipper is not None:
                run.shipper.ack(order.log_seq)
                if run.live:
                    self._acked[run.lease_id] = run.shipper.acked
                self._maybe_forget(run)
        elif isinstance(order, ResultAck):
            run = self._runs.get(order.lease_id)
            if run is not None and run.finished is not None:
                run.finished_acked = True
                if order.log_seq and run.shipper is not None:
                    run.shipper.ack(order.log_seq)  # the lines its JobFinished carried
                self._maybe_forget(run)

    async def stop(self, *, leave_running: bool = False) -> None:
        """Kill every run (the scheduler requeues them when this worker is gone), or
        with `leave_running` leave them to the supervisor for the next daemon."""
        self._stopping = True
        tasks = []
        for run in self._runs.values():
            if not leave_running:
                self._request_kill(run, KillReason.SHUTDOWN, "the worker is shutting down", "")
            elif run.slot_wait is not None and not run.slot_wait.done():
                run.slot_wait.set_result(False)  # not started: the scheduler requeues it
            if run.task is not None and (not leave_running or not run.live):
                tasks.append(run.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.setup.grace_s + 5)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if not leave_running and self.supervisor.connected:
            self.supervisor.send(Shutdown())
        for run in self._runs.values():
            run.close()
            if leave_running and run.task is not None:
                run.task.cancel()
        self.supervisor.close()
        self._folders.close()
        self._threads.shutdown(wait=False)

    def _accept(self, lease: JobLeaseInfo) -> None:
        if lease.lease_id in self._runs:
            log.info("lease %s is already here; ignoring the repeat", lease.lease_id)
            return
        if self._stopping:
            return  # not held in the next Register, so the scheduler requeues it
        if not _SAFE_LEASE.fullmatch(lease.lease_id) or ".." in lease.lease_id:
            log.error("refusing job lease with unsafe id %r", lease.lease_id)
            return
        run = LeaseRun(lease, RunDirs(root=self.root / lease.lease_id))
        run.shipper = LogShipper(lease, None, send=self._send, connected=self._connected)
        self._runs[lease.lease_id] = run
        run.task = asyncio.create_task(self._lifecycle(run), name=f"job-{lease.lease_id}")

    def _kill(self, kill: KillOrder | InputOrder) -> None:
        run = self._runs.get(kill.lease_id)
        if run is None or run.finished is not None:
            log.info("%s for %s, which no longer runs here", type(kill).__name__, kill.lease_id)
        elif not isinstance(kill, InputOrder):
            self._request_kill(run, *kill_request(kill))
        elif self.supervisor.connected:  # an interactive run's stdin or signal, once started
            run.inputs.offer(input_message(kill), self.supervisor.send)

    def _request_kill(self, run: LeaseRun, reason: KillReason, message: str, state: str) -> None:
        if run.kill is None:
            run.kill = (reason, message, state)
        if run.live and self.supervisor.connected:
            self.supervisor.send(
                KillRun(lease_id=run.lease_id, reason=reason.value, message=message)
            )
        if run.slot_wait is not None and not run.slot_wait.done():
            run.slot_wait.set_result(False)

    # ------------------------------------------------------------------ one run

    async def _lifecycle(self, run: LeaseRun) -> None:
        loop = asyncio.get_running_loop()
        try:
            run.has_slot = await self._slots.acquire(run)
            if run.lease.input_root is None and run.lease.checkpoint is None:
                prepared = prepare(run, self.setup, self._sink(run, direct=True))  # mkdirs
            else:
                prepared = await loop.run_in_executor(
                    self._threads, prepare, run, self.setup, self._sink(run)
                )
            if isinstance(prepared, RunResult):
                result = prepared
            elif run.kill is not None or self._stopping:
                why = run.kill[1] if run.kill is not None else "the worker is shutting down"
                result = RunResult(function=run.function)
                self._reopen_spool(run)
                self._sys(run, f"{why} before the job started; not starting it")
            else:
                await self.start()
                run.exited = loop.create_future()
                self.supervisor.send(StartRun(spec=prepared))
                await self._conclude(run)
                return
            msg = report(run, result, lambda text: self._sys(run, text))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("job lease %s failed on this worker", run.lease_id)
            msg = self._failed(run, e)
        self._end(run, msg)

    async def _conclude(self, run: LeaseRun) -> None:
        """Wait for the supervisor's Exited, store the outputs, report."""
        assert run.exited is not None
        try:
            exited = await run.exited
            if exited.lapsed:
                self._drop_lapsed(run)
                return
            if run.outputs or run.checkpoint_dir:
                result = await asyncio.get_running_loop().run_in_executor(
                    self._threads, finish, run, self.setup.store, exited, self._sink(run)
                )
            else:
                result = finish(run, self.setup.store, exited, self._sink(run, direct=True))
            msg = report(run, result, lambda text: self._sys(run, text))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("job lease %s failed on this worker", run.lease_id)
            msg = self._failed(run, e)
        self._end(run, msg)

    def _failed(self, run: LeaseRun, e: Exception) -> JobFinishedReport:
        if not run.live:
            self._reopen_spool(run)
            self._sys(run, f"the worker failed running this job: {type(e).__name__}: {e}")
        return finished(run.lease, JobState.FAILED.value, START_FAILED_EXIT, message=str(e))

    def _end(self, run: LeaseRun, msg: JobFinishedReport) -> None:
        if run.has_slot:
            run.has_slot = False
            self._slots.release()
        if self._stopping:
            return
        # The slot is free before the scheduler hears of it, so its next lease fits.
        run.finished = msg  # its last lines go in it, or before it (LogShipper.finish)
        if self._connected():
            self._send(run.shipper.finish(msg) if run.shipper is not None else msg)
            run.finished_sent = True
        self._maybe_forget(run)

    def _reopen_spool(self, run: LeaseRun) -> None:
        """Writable again once nobody else appends (the supervisor does not hold it)."""
        if run.spool is not None and not run.spool.writable:
            run.spool.close()
            run.spool = LogSpool(run.dirs.spool)

    def _sink(self, run: LeaseRun, direct: bool = False) -> LogSink:
        """Where a run's own lines go: straight in, or from a thread to the loop."""
        if direct:
            return lambda lines: self._on_lines(run, lines)
        return thread_sink(lambda lines: self._on_lines(run, lines))

    # ------------------------------------------------------------------ logs and reports

    def _on_lines(self, run: LeaseRun, lines: Sequence[LogLine]) -> None:
        shipper = run.shipper
        if shipper is None or not lines:
            return
        if shipper.spool is not run.spool:
            shipper.spool = run.spool
        shipper.on_lines(lines)

    def _sys(self, run: LeaseRun, text: str) -> None:
        try:
            if run.spool is None or not run.spool.writable or run.shipper is None:
                raise LogSpoolError("no log to write to")
            self._on_lines(run, run.spool.append([(LogStream.SYS, text, True)]))
        except (OSError, LogSpoolError) as e:  # a full work dir: the report says it too
            log.warning("lease %s: %s (not in its log: %s)", run.lease_id, text, e)

    def _drop_lapsed(self, run: LeaseRun) -> None:
        """Stopped by the supervisor when its lease lapsed: not reported, so not held in
        the next Register; the server requeues it (or has already)."""
        log.warning("job lease %s lapsed: no word from the server; run stopped", run.lease_id)
        if run.has_slot:
            run.has_slot = False
            self._slots.release()
        self._runs.pop(run.lease_id, None)
        if self.supervisor.connected:
            self.supervisor.send(Forget(lease_id=run.lease_id))
        run.close()
        self._folders.add(run.dirs)

    def _maybe_forget(self, run: LeaseRun) -> None:
        """Drop a reported run once every log line is acknowledged (or nothing is left
        to acknowledge): the supervisor forgets it; its folder is reused or goes
        (`runfolders`)."""
        if run.finished is None or not run.finished_acked:
            return
        if run.shipper is not None and not run.shipper.all_acked:
            return
        self._runs.pop(run.lease_id, None)
        self._forgotten[run.lease_id] = run
        while len(self._forgotten) > FORGOTTEN_KEPT:
            self._forgotten.popitem(last=False)
        if run.exited is not None and self.supervisor.connected:
            self.supervisor.send_later(Forget(lease_id=run.lease_id))  # with the next StartRun
        run.close()
        self._folders.add(run.dirs)  # on a thread, with other runs' folders


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("no new run supervisor (the next job tries): %s", task.exception())


def cgroup_scope(worker_id: str) -> str:
    """The cgroup scope of a worker's jobs: its id, made safe for a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", worker_id)[:64].lstrip(".") or "worker"
