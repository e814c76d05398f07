"""The worker's job host: runs the job leases the scheduler sends, in job slots.

The worker daemon hands every JobLease, KillJob and Ack it receives to `handle()`.
A lease becomes a run: on a thread (`jobrun.execute`) its folder is made, its input
tree (and checkpoint, on a retry) copied out of the CAS, and the job runner starts the
process with the lease's environment and the manifest's cpu and memory limits; the
process's numbered log lines are shipped as they come (`jobship`). When the process
ends, whatever the reason, the declared outputs and the checkpoint folder are stored
as trees, the last log lines are queued, and only then JobFinished, so a follower of
the log sees every line before the job's end.

The scheduler owns time limits and final states: the host never passes the time limit
to the runner; a KillJob(reason="timeout") ends the run, and the scheduler maps its
own kill reasons to TIMEOUT, CANCELLED or PREEMPTED. JobStarted goes out once a run
has been alive for `START_REPORT_DELAY_S`: a job that is over sooner needs no start
report (its JobFinished says everything), which spares the stream a message per
short job.

Across a broken stream: runs carry on; their lease ids, and those of runs whose
JobFinished the server has not acknowledged (ResultAck) yet, are listed in the next Register
(`held_leases`) so the scheduler keeps them here; after registering, `on_connected`
re-sends every unacknowledged log line and then the held JobFinished messages. A run's
folder goes once its outputs are stored; its log spool once every line is
acknowledged. Runs do not survive a worker restart: the next worker process sweeps
their cgroups and folders, and the scheduler, not seeing them held, requeues them.

A JobFinished counts as delivered only once the server acknowledges it, which it does
after the journal commit of the step that took it: a server killed between reading it
and journaling it gets it again from this worker after its restart.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rbs.cas.store import BlobStore
from rbs.executor import jobfiles
from rbs.executor.cgroup_base import CgroupBackend, CgroupError
from rbs.executor.jobfiles import RunDirs
from rbs.executor.jobrun import HostSetup, LeaseRun, RunResult, execute
from rbs.executor.jobship import LogShipper
from rbs.executor.lease import PGID_FILE, WorkerLease
from rbs.model import Digest, JobState, KillReason, LogLine, LogStream
from rbs.wire.workers_jobs import (
    JobFinishedReport,
    JobLeaseInfo,
    JobOrder,
    JobReport,
    JobStartedReport,
    KillOrder,
    LogAck,
    ResultAck,
)

log = logging.getLogger(__name__)

# Seconds between SIGTERM and SIGKILL when a job is killed (cancel, timeout, shutdown).
DEFAULT_GRACE_S = 10.0
# The exit code reported for a run whose process could not be started at all (its
# inputs could not be materialized, its program was not found): like `docker run`'s 125.
START_FAILED_EXIT = 125
# A run still going this long after its process started is reported as started.
START_REPORT_DELAY_S = 0.05
# How many reported runs to remember in case their JobFinished comes back unsent
# (more than a worker's outbox ever holds between two writes).
FORGOTTEN_KEPT = 1000
_SAFE_LEASE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")

# The state a run killed for each reason reports when KillJob.state does not name one.
_KILL_STATES: dict[KillReason, JobState] = {
    KillReason.TIMEOUT: JobState.TIMEOUT,
    KillReason.CANCEL: JobState.CANCELLED,
    KillReason.PREEMPT: JobState.PREEMPTED,
    KillReason.REQUEUE: JobState.PREEMPTED,
    KillReason.GANG_PEER_ENDED: JobState.CANCELLED,
    KillReason.NODE_FAIL: JobState.NODE_FAIL,
    KillReason.ORPHAN: JobState.CANCELLED,
}


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
        prefetch: Callable[[Digest], None] | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        env: Mapping[str, str] | None = None,
        lease: WorkerLease | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a job host needs at least one job slot, got {slots}")
        self.root = work_dir / "jobs"
        self.backend = backend
        self.slots = slots
        self.setup = HostSetup(
            store=store,
            backend=backend,
            hostname=hostname,
            grace_s=grace_s,
            env=env,
            prefetch=prefetch,
            record_pgid=lease is not None,
        )
        self._send = send
        self._connected = connected
        self._lease = lease
        self._runs: dict[str, LeaseRun] = {}
        # Forgotten runs whose JobFinished may still sit in the worker's outbox: if the
        # stream breaks before it is written, `unsent` brings the run back.
        self._forgotten: collections.OrderedDict[str, LeaseRun] = collections.OrderedDict()
        self._free = slots
        self._waiting: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._stopping = False
        self._starts: collections.deque[tuple[float, float, LeaseRun]] = collections.deque()
        self._start_timer: asyncio.TimerHandle | None = None
        # Pooled threads: a thread started per job costs the loop a handshake with it,
        # which a busy host makes slow. Runs killed while waiting need a thread too.
        self._threads = ThreadPoolExecutor(slots + 2, thread_name_prefix="rbs-job")
        self._clean_leftovers()

    def _clean_leftovers(self) -> None:
        """Runs of a previous worker process cannot be re-attached: end and remove them."""
        try:
            swept = self.backend.sweep()
        except CgroupError as e:
            log.warning("could not sweep job cgroups left by a previous run: %s", e)
            swept = []
        if swept:
            log.info("killed and removed %d job cgroup(s) left by a previous run", len(swept))
        jobfiles.remove(self.root)
        self.root.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ what the worker asks

    def slots_used(self) -> int:
        return self.slots - self._free

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
            self._accept(order)
        elif isinstance(order, KillOrder):
            self._kill(order)
        elif isinstance(order, LogAck):
            run = self._runs.get(order.lease_id)
            if run is not None and run.shipper is not None:
                run.shipper.ack(order.log_seq)
                self._maybe_forget(run)
        elif isinstance(order, ResultAck):
            run = self._runs.get(order.lease_id)
            if run is not None and run.finished is not None:
                run.finished_acked = True
                self._maybe_forget(run)

    async def stop(self) -> None:
        """Kill every run (the scheduler requeues them when this worker is gone)."""
        self._stopping = True
        tasks = []
        for run in self._runs.values():
            self._request_kill(run, KillReason.SHUTDOWN, "the worker is shutting down", "")
            if run.task is not None:
                tasks.append(run.task)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.setup.grace_s + 5)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for run in self._runs.values():
            if run.shipper is not None:
                run.shipper.close()
            if run.spool is not None:
                run.spool.close()
        self._threads.shutdown(wait=False)

    # ------------------------------------------------------------------ leases and kills

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

    def _kill(self, kill: KillOrder) -> None:
        run = self._runs.get(kill.lease_id)
        if run is None or run.finished is not None:
            log.info("kill for %s, which no longer runs here (%s)", kill.lease_id, kill.reason)
            return
        try:
            reason = KillReason(kill.reason)
            why = reason.words
        except ValueError:  # none given, or one this worker does not know
            reason, why = KillReason.CANCEL, kill.reason or "killed"
        state = _KILL_STATES.get(reason, JobState.CANCELLED).value
        self._request_kill(run, reason, f"{why} (scheduler)", kill.state or state)

    def _request_kill(self, run: LeaseRun, reason: KillReason, message: str, state: str) -> None:
        if run.kill is None:
            run.kill = (reason, message, state)
        if run.runner is not None:
            run.runner.kill(reason, message)
        if run.slot_wait is not None and not run.slot_wait.done():
            run.slot_wait.set_result(False)

    # ------------------------------------------------------------------ slots

    async def _acquire(self, run: LeaseRun) -> bool:
        """Wait for a free job slot; False when the run was killed while waiting."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return True
        log.warning(
            "lease %s arrived with all %d job slots busy; it waits for one",
            run.lease_id,
            self.slots,
        )
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        run.slot_wait = fut
        self._waiting.append(fut)
        return await fut

    def _release(self) -> None:
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_result(True)
                return
        self._free += 1

    # ------------------------------------------------------------------ one run

    async def _lifecycle(self, run: LeaseRun) -> None:
        loop = asyncio.get_running_loop()
        try:
            run.has_slot = await self._acquire(run)
            result = await loop.run_in_executor(
                self._threads, execute, run, self.setup, self._sink(run)
            )
            msg = self._report(run, result)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("job lease %s failed on this worker", run.lease_id)
            self._sys(run, f"the worker failed running this job: {type(e).__name__}: {e}")
            msg = _finished(run.lease, JobState.FAILED.value, START_FAILED_EXIT, message=str(e))
        finally:
            if run.has_slot:
                run.has_slot = False
                self._release()
        if self._stopping:
            return
        if self._lease is not None and WorkerLease.lapsed(run.dirs.root):
            self._drop_lapsed(run)
            return
        # The slot is free before the scheduler hears of it, so its next lease fits.
        if run.shipper is not None:
            run.shipper.flush()  # every line goes out before the JobFinished
        run.finished = msg
        if self._connected():
            self._send(msg)
            run.finished_sent = True
        self._maybe_forget(run)

    def _sink(self, run: LeaseRun) -> Callable[[Sequence[LogLine]], None]:
        """Lines from the run's thread to the loop, many per wake-up of the loop."""
        loop = asyncio.get_running_loop()
        lock = threading.Lock()
        pending: list[LogLine] = []

        def drain() -> None:
            with lock:
                lines = pending[:]
                pending.clear()
            self._on_lines(run, lines)

        def sink(lines: Sequence[LogLine]) -> None:
            with lock:
                wake = not pending
                pending.extend(lines)
            if wake:
                loop.call_soon_threadsafe(drain)

        return sink

    # ------------------------------------------------------------------ logs and reports

    def _on_lines(self, run: LeaseRun, lines: Sequence[LogLine]) -> None:
        shipper = run.shipper
        if shipper is None or not lines:
            return
        if shipper.spool is None:
            shipper.spool = run.spool
        if not run.start_reported and run.runner is not None and run.runner.pid is not None:
            run.start_reported = True  # considered once
            self._starts.append((time.monotonic(), time.time(), run))
            if self._start_timer is None:
                self._start_timer = asyncio.get_running_loop().call_later(
                    START_REPORT_DELAY_S, self._report_starts
                )
        shipper.on_lines(lines)

    def _report_starts(self) -> None:
        """One timer for every pending start report, not one per run."""
        self._start_timer = None
        now = time.monotonic()
        while self._starts and now - self._starts[0][0] >= START_REPORT_DELAY_S:
            _, started_at, run = self._starts.popleft()
            self._report_start(run, started_at)
        if self._starts:
            wait = START_REPORT_DELAY_S - (now - self._starts[0][0])
            self._start_timer = asyncio.get_running_loop().call_later(wait, self._report_starts)

    def _report_start(self, run: LeaseRun, started_at: float) -> None:
        runner = run.runner
        if runner is None or runner.pid is None or runner.finished.is_set():
            return  # over already: its JobFinished says everything
        lease = run.lease
        self._send(
            JobStartedReport(
                lease_id=lease.lease_id,
                job_id=lease.job_id,
                task_index=lease.task_index,
                attempt=lease.attempt,
                pid=runner.pid,
                started_at=started_at,
            )
        )

    def _sys(self, run: LeaseRun, text: str) -> None:
        if run.spool is None or run.shipper is None:
            log.warning("lease %s: %s", run.lease_id, text)
            return
        if run.shipper.spool is None:
            run.shipper.spool = run.spool
        run.shipper.on_lines(run.spool.append([(LogStream.SYS, text, True)]))

    def _report(self, run: LeaseRun, result: RunResult) -> JobFinishedReport:
        outcome = result.outcome
        if result.problem is not None:
            self._sys(run, result.problem)
            return _finished(
                run.lease, JobState.FAILED.value, START_FAILED_EXIT, message=result.problem
            )
        if outcome is None:  # killed before it started
            reason = run.kill[1] if run.kill else "killed before it started"
            state = (run.kill[2] if run.kill else "") or JobState.CANCELLED.value
            return _finished(run.lease, state, 0, message=reason)
        state = outcome.state.value
        if run.kill is not None and outcome.kill_reason is not None and run.kill[2]:
            state = run.kill[2]
        if outcome.error is not None:
            code, sig = START_FAILED_EXIT, 0
        elif outcome.signal is not None:
            code, sig = 128 + outcome.signal, outcome.signal
        else:
            code, sig = outcome.exit_code or 0, 0
        return _finished(
            run.lease,
            state,
            code,
            signal=sig,
            peak=outcome.peak_memory_bytes or 0,
            oom=outcome.oom_kills > 0,
            message="" if outcome.state is JobState.COMPLETED else outcome.describe(),
            trees=result,
        )

    def _drop_lapsed(self, run: LeaseRun) -> None:
        """Stopped by the watchdog when its lease lapsed: not reported, so not held in
        the next Register; the server requeues it (or has already)."""
        log.warning("job lease %s lapsed: no word from the server; run stopped", run.lease_id)
        self._runs.pop(run.lease_id, None)
        if run.shipper is not None:
            run.shipper.close()
        if run.spool is not None:
            run.spool.close()
        asyncio.get_running_loop().run_in_executor(self._threads, jobfiles.remove, run.dirs.root)

    def _maybe_forget(self, run: LeaseRun) -> None:
        """Drop a reported run once every log line is acknowledged (or nothing is left
        to acknowledge), removing its folder and spool on a thread."""
        if run.finished is None or not run.finished_acked:
            return
        if run.shipper is not None and not run.shipper.all_acked:
            return
        self._runs.pop(run.lease_id, None)
        self._forgotten[run.lease_id] = run
        while len(self._forgotten) > FORGOTTEN_KEPT:
            self._forgotten.popitem(last=False)
        if run.shipper is not None:
            run.shipper.close()
        if run.spool is not None:
            run.spool.close()
        try:
            # Normally only the spool is left (execute removed work/ and tmp/): two
            # system calls, cheaper here than a trip to a thread.
            with contextlib.suppress(FileNotFoundError):
                run.dirs.spool.unlink()
            if self._lease is not None:
                with contextlib.suppress(FileNotFoundError):
                    (run.dirs.root / PGID_FILE).unlink()
            run.dirs.root.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            asyncio.get_running_loop().run_in_executor(
                self._threads, jobfiles.remove, run.dirs.root
            )


def _finished(
    lease: JobLeaseInfo,
    state: str,
    exit_code: int,
    *,
    signal: int = 0,
    peak: int = 0,
    oom: bool = False,
    message: str = "",
    trees: RunResult | None = None,
) -> JobFinishedReport:
    """The report of a run; with `trees`, the run's stored outputs and checkpoint too."""
    return JobFinishedReport(
        lease_id=lease.lease_id,
        job_id=lease.job_id,
        task_index=lease.task_index,
        attempt=lease.attempt,
        state=state,
        exit_code=exit_code,
        signal=signal,
        peak_memory_bytes=peak,
        oom_killed=oom,
        message=message,
        finished_at_ns=time.time_ns(),
        digest_function=trees.function if trees is not None else None,
        output_tree=trees.trees.outputs if trees is not None else None,
        checkpoint_tree=trees.trees.checkpoint if trees is not None else None,
    )


def cgroup_scope(worker_id: str) -> str:
    """The cgroup scope of a worker's jobs: its id, made safe for a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", worker_id)[:64].lstrip(".") or "worker"
