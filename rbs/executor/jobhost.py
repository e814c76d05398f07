"""The worker's job host: runs the job leases the scheduler sends, in job slots.

The worker daemon hands every JobLease, KillJob and Ack it receives to `handle()`.
A lease becomes a run: its folder is made and its input tree (and checkpoint, on a
retry) copied out of the CAS, the job runner starts the process with the lease's
environment and the manifest's cpu and memory limits, and the process's numbered log
lines are shipped as they come (`jobship`). When the process ends, whatever the
reason, the declared outputs and the checkpoint folder are stored as trees, the last
log lines are queued, and only then JobFinished, so a follower of the log sees every
line before the job's end.

The scheduler owns time limits and final states: the host never passes the time limit
to the runner; a KillJob(reason="timeout") ends the run, and the scheduler maps its
own kill reasons to TIMEOUT, CANCELLED or PREEMPTED.

Across a broken stream: runs carry on; their lease ids, and those of runs whose
JobFinished has not been written to a stream yet, are listed in the next Register
(`held_leases`) so the scheduler keeps them here; after registering, `on_connected`
re-sends every unacknowledged log line and then the held JobFinished messages. A run's
folder goes once its outputs are stored; its log spool once every line is
acknowledged. Runs do not survive a worker restart: the next worker process sweeps
their cgroups and folders, and the scheduler, not seeing them held, requeues them.

A JobFinished written to a stream counts as delivered: the server handles a stream's
messages in order and journals the exit at once, so only a server killed in the
instant between reading it and journaling it misses one (the run is then requeued).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.cas.errors import CasError
from rbs.cas.store import BlobStore
from rbs.executor import jobfiles
from rbs.executor.cgroup_base import CgroupBackend, CgroupError
from rbs.executor.jobfiles import CollectedTrees, RunDirs
from rbs.executor.joblog import LogLine, LogSpool, Stream
from rbs.executor.jobproc import JobRunner
from rbs.executor.jobship import LogShipper
from rbs.executor.jobspec import JobOutcome, JobSpec, KillReason, RunState
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction, JobManifest

log = logging.getLogger(__name__)

# Seconds between SIGTERM and SIGKILL when a job is killed (cancel, timeout, shutdown).
DEFAULT_GRACE_S = 10.0
# The exit code reported for a run whose process could not be started at all (its
# inputs could not be materialized, its program was not found): like `docker run`'s 125.
START_FAILED_EXIT = 125
_SAFE_LEASE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_FUNCTIONS = {
    re_pb2.DigestFunction.SHA256: DigestFunction.SHA256,
    re_pb2.DigestFunction.BLAKE3: DigestFunction.BLAKE3,
}
_FUNCTION_VALUES = {v: k for k, v in _FUNCTIONS.items()}

# The scheduler's kill reasons (rbs.scheduler.instructions.KillReason values) as the
# runner's reasons, and the state reported when KillJob.state does not name one.
_KILLS: dict[str, tuple[KillReason, str]] = {
    "timeout": (KillReason.TIME_LIMIT, "TIMEOUT"),
    "cancel": (KillReason.CANCELLED, "CANCELLED"),
    "preempt": (KillReason.PREEMPTED, "PREEMPTED"),
    "requeue": (KillReason.PREEMPTED, "PREEMPTED"),
    "gang-peer-ended": (KillReason.PEER_ENDED, "CANCELLED"),
    "node-fail": (KillReason.PEER_ENDED, "NODE_FAIL"),
    "orphan": (KillReason.CANCELLED, "CANCELLED"),
}


class _Run:
    """One lease on this worker, from its arrival until it is reported and acknowledged."""

    def __init__(self, lease: w_pb2.JobLease, dirs: RunDirs) -> None:
        self.lease = lease
        self.dirs = dirs
        self.spool: LogSpool | None = None
        self.shipper: LogShipper | None = None
        self.runner: JobRunner | None = None
        self.task: asyncio.Task[None] | None = None
        self.slot_wait: asyncio.Future[bool] | None = None
        self.has_slot = False
        self.kill: tuple[KillReason, str, str] | None = None  # reason, message, state
        self.started_sent = False
        self.finished: w_pb2.WorkerMessage | None = None
        self.finished_sent = False

    @property
    def lease_id(self) -> str:
        return str(self.lease.lease_id)

    @property
    def held(self) -> bool:
        """Whether the scheduler must keep this run with this worker."""
        return self.finished is None or not self.finished_sent


class JobHost:
    """Runs job leases on one worker; see the module docstring."""

    def __init__(
        self,
        *,
        work_dir: Path,
        store: BlobStore,
        send: Callable[[w_pb2.WorkerMessage], None],
        connected: Callable[[], bool],
        slots: int,
        hostname: str,
        backend: CgroupBackend,
        prefetch: Callable[[Digest], None] | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"a job host needs at least one job slot, got {slots}")
        self.root = work_dir / "jobs"
        self.store = store
        self.backend = backend
        self.slots = slots
        self.hostname = hostname
        self.grace_s = grace_s
        self._send = send
        self._connected = connected
        self._prefetch = prefetch
        self._env = env
        self._runs: dict[str, _Run] = {}
        self._free = slots
        self._waiting: collections.deque[asyncio.Future[bool]] = collections.deque()
        self._stopping = False
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
            if run.finished is not None and not run.finished_sent:
                self._send(run.finished)
                run.finished_sent = True
            self._maybe_forget(run)

    def unsent(self, msg: w_pb2.WorkerMessage) -> None:
        """The worker could not write this JobFinished to the stream: hold it again."""
        run = self._runs.get(msg.job_finished.lease_id)
        if run is not None and run.finished is not None:
            run.finished_sent = False

    async def handle(self, msg: w_pb2.ServerMessage) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "job_lease":
            self._accept(msg.job_lease)
        elif kind == "kill_job":
            self._kill(msg.kill_job)
        elif kind == "ack":
            run = self._runs.get(msg.ack.lease_id)
            if run is not None and run.shipper is not None:
                run.shipper.ack(msg.ack.log_seq)
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
            _, pending = await asyncio.wait(tasks, timeout=self.grace_s + 5)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for run in self._runs.values():
            if run.shipper is not None:
                run.shipper.close()
            if run.spool is not None:
                run.spool.close()

    # ------------------------------------------------------------------ leases and kills

    def _accept(self, lease: w_pb2.JobLease) -> None:
        if lease.lease_id in self._runs:
            log.info("lease %s is already here; ignoring the repeat", lease.lease_id)
            return
        if self._stopping:
            return  # not held in the next Register, so the scheduler requeues it
        if not _SAFE_LEASE.fullmatch(lease.lease_id) or ".." in lease.lease_id:
            log.error("refusing job lease with unsafe id %r", lease.lease_id)
            return
        run = _Run(lease, RunDirs(root=self.root / lease.lease_id))
        self._runs[lease.lease_id] = run
        run.task = asyncio.create_task(self._lifecycle(run), name=f"job-{lease.lease_id}")

    def _kill(self, kill: w_pb2.KillJob) -> None:
        run = self._runs.get(kill.lease_id)
        if run is None or run.finished is not None:
            log.info("kill for %s, which no longer runs here (%s)", kill.lease_id, kill.reason)
            return
        reason, state = _KILLS.get(kill.reason, (KillReason.CANCELLED, "CANCELLED"))
        why = {
            "timeout": "time limit reached",
            "cancel": "cancelled",
            "orphan": "the scheduler no longer expects this run",
        }.get(kill.reason, kill.reason or "killed")
        self._request_kill(run, reason, f"{why} (scheduler)", kill.state or state)

    def _request_kill(self, run: _Run, reason: KillReason, message: str, state: str) -> None:
        if run.kill is None:
            run.kill = (reason, message, state)
        if run.runner is not None:
            run.runner.kill(reason, message)
        if run.slot_wait is not None and not run.slot_wait.done():
            run.slot_wait.set_result(False)

    # ------------------------------------------------------------------ slots

    async def _acquire(self, run: _Run) -> bool:
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

    async def _lifecycle(self, run: _Run) -> None:
        try:
            run.has_slot = await self._acquire(run)
            msg = await self._execute(run)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("job lease %s failed on this worker", run.lease_id)
            self._sys(run, f"the worker failed running this job: {type(e).__name__}: {e}")
            msg = _finished(run.lease, RunState.FAILED.value, START_FAILED_EXIT, message=str(e))
        finally:
            if run.has_slot:
                run.has_slot = False
                self._release()
        if self._stopping:
            return
        # The slot is free before the scheduler hears of it, so its next lease fits.
        if run.shipper is not None:
            run.shipper.flush()  # every line goes out before the JobFinished
        run.finished = msg
        if self._connected():
            self._send(msg)
            run.finished_sent = True
        self._maybe_forget(run)

    async def _execute(self, run: _Run) -> w_pb2.WorkerMessage:
        lease = run.lease
        run.dirs.root.mkdir(parents=True, exist_ok=True)
        run.spool = LogSpool(run.dirs.spool)
        run.shipper = LogShipper(lease, run.spool, send=self._send, connected=self._connected)
        from rbs.scheduler.manifest import manifest_from_json

        try:
            manifest = manifest_from_json(lease.manifest_json)
            fn = _function(lease.digest_function)
        except ValueError as e:
            return self._failed(run, f"cannot read the job lease: {e}")
        if run.kill is not None:
            self._sys(run, f"{run.kill[1]} before the job started; not starting it")
            return self._killed_early(run)
        try:
            notes = await asyncio.to_thread(
                jobfiles.prepare,
                self.store,
                run.dirs,
                input_root=_digest(lease, "input_root_digest", fn),
                checkpoint=_digest(lease, "checkpoint_digest", fn),
                checkpoint_dir=manifest.checkpoint_dir,
                prefetch=self._prefetch,
            )
        except (CasError, OSError, ValueError) as e:
            return self._failed(run, f"cannot prepare the job's working directory: {e}")
        for note in notes:
            self._sys(run, note)
        try:
            spec = self._spec(lease, manifest, run.dirs)
        except ValueError as e:
            return self._failed(run, f"cannot run the job: {e}")
        loop = asyncio.get_running_loop()
        shipper = run.shipper

        def sink(lines: Sequence[LogLine]) -> None:
            loop.call_soon_threadsafe(self._on_lines, run, shipper, lines)

        runner = run.runner = JobRunner(
            spec, spool=run.spool, backend=self.backend, sink=sink, hostname=self.hostname
        )
        if run.kill is not None:
            runner.kill(run.kill[0], run.kill[1])
        outcome = await runner.run_async()
        self._confirm_start(run, outcome.started_at)
        if self._stopping:
            return self._report(run, outcome, CollectedTrees(), fn)
        try:
            trees = await asyncio.to_thread(
                jobfiles.collect,
                self.store,
                run.dirs.work,
                outputs=manifest.outputs,
                checkpoint_dir=manifest.checkpoint_dir,
                function=fn,
            )
        except (CasError, OSError, ValueError) as e:
            log.warning("lease %s: storing outputs failed: %s", run.lease_id, e)
            self._sys(run, f"storing the job's outputs failed: {e}")
            trees = CollectedTrees()
        for note in trees.notes:
            self._sys(run, note)
        await asyncio.to_thread(jobfiles.remove, run.dirs.work)
        await asyncio.to_thread(jobfiles.remove, run.dirs.tmp)
        return self._report(run, outcome, trees, fn)

    def _spec(self, lease: w_pb2.JobLease, manifest: JobManifest, dirs: RunDirs) -> JobSpec:
        env = jobfiles.base_env(dirs, self._env)
        env.update(lease.env)  # the scheduler's variables are complete and win
        res = manifest.resources
        return JobSpec(
            job_id=lease.job_id,
            argv=manifest.command,
            workdir=dirs.work,
            env=env,
            task_id=lease.env.get("RBS_TASK_ID") if lease.task_index >= 0 else None,
            attempt=max(1, lease.attempt),
            cpus=res.cpu_millis / 1000,
            memory_bytes=res.memory_bytes,
            gpu_ids=tuple(lease.gpu_ids),
            time_limit_s=None,  # the scheduler enforces it with KillJob(reason="timeout")
            grace_s=self.grace_s,
            outputs=(),  # collected by jobfiles.collect, into one tree
        )

    # ------------------------------------------------------------------ logs and reports

    def _on_lines(self, run: _Run, shipper: LogShipper, lines: Sequence[LogLine]) -> None:
        if not run.started_sent and run.runner is not None and run.runner.pid is not None:
            self._confirm_start(run, time.time())
        shipper.on_lines(lines)

    def _sys(self, run: _Run, text: str) -> None:
        if run.spool is None or run.shipper is None:
            log.warning("lease %s: %s", run.lease_id, text)
            return
        run.shipper.on_lines(run.spool.append([(Stream.SYS, text, True)]))

    def _confirm_start(self, run: _Run, started_at: float | None) -> None:
        if run.started_sent or started_at is None or run.runner is None or run.runner.pid is None:
            return
        run.started_sent = True
        lease = run.lease
        msg = w_pb2.JobStarted(
            lease_id=lease.lease_id,
            job_id=lease.job_id,
            task_index=lease.task_index,
            attempt=lease.attempt,
            pid=run.runner.pid,
        )
        msg.started_at.FromNanoseconds(int(started_at * 1e9))
        self._send(w_pb2.WorkerMessage(job_started=msg))

    def _failed(self, run: _Run, message: str) -> w_pb2.WorkerMessage:
        self._sys(run, message)
        return _finished(run.lease, RunState.FAILED.value, START_FAILED_EXIT, message=message)

    def _killed_early(self, run: _Run) -> w_pb2.WorkerMessage:
        assert run.kill is not None
        return _finished(run.lease, run.kill[2] or "CANCELLED", 0, message=run.kill[1])

    def _report(
        self, run: _Run, outcome: JobOutcome, trees: CollectedTrees, fn: DigestFunction
    ) -> w_pb2.WorkerMessage:
        state = outcome.state.value
        if run.kill is not None and outcome.kill_reason is not None and run.kill[2]:
            state = run.kill[2]
        if outcome.error is not None:
            code, sig = START_FAILED_EXIT, 0
        elif outcome.signal is not None:
            code, sig = 128 + outcome.signal, outcome.signal
        else:
            code, sig = outcome.exit_code or 0, 0
        msg = _finished(
            run.lease,
            state,
            code,
            signal=sig,
            peak=outcome.peak_memory_bytes or 0,
            oom=outcome.oom_kills > 0,
            message="" if outcome.state is RunState.COMPLETED else outcome.describe(),
        )
        fin = msg.job_finished
        fin.digest_function = _FUNCTION_VALUES[fn]
        if trees.outputs is not None:
            fin.output_tree_digest.hash = trees.outputs.hash
            fin.output_tree_digest.size_bytes = trees.outputs.size
        if trees.checkpoint is not None:
            fin.checkpoint_tree_digest.hash = trees.checkpoint.hash
            fin.checkpoint_tree_digest.size_bytes = trees.checkpoint.size
        return msg

    def _maybe_forget(self, run: _Run) -> None:
        """Drop a reported run once every log line is acknowledged (or nothing is left
        to acknowledge), removing its folder and spool."""
        if run.finished is None or not run.finished_sent:
            return
        if run.shipper is not None and not run.shipper.all_acked:
            return
        self._runs.pop(run.lease_id, None)
        if run.shipper is not None:
            run.shipper.close()
        if run.spool is not None:
            run.spool.close()
        jobfiles.remove(run.dirs.root)


def _function(value: int) -> DigestFunction:
    if value == re_pb2.DigestFunction.UNKNOWN:
        return DEFAULT_FUNCTION
    fn = _FUNCTIONS.get(value)
    if fn is None:
        raise ValueError(
            f"digest function {value} is not supported by this worker (SHA256 and BLAKE3 are)"
        )
    return fn


def _digest(lease: w_pb2.JobLease, field: str, fn: DigestFunction) -> Digest | None:
    if not lease.HasField(field):
        return None
    d = getattr(lease, field)
    if not d.hash:
        return None
    return Digest(function=fn, hash=d.hash, size=d.size_bytes)


def _finished(
    lease: w_pb2.JobLease,
    state: str,
    exit_code: int,
    *,
    signal: int = 0,
    peak: int = 0,
    oom: bool = False,
    message: str = "",
) -> w_pb2.WorkerMessage:
    fin = w_pb2.JobFinished(
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
    )
    fin.finished_at.FromNanoseconds(time.time_ns())
    return w_pb2.WorkerMessage(job_finished=fin)


def cgroup_scope(worker_id: str) -> str:
    """The cgroup scope of a worker's jobs: its id, made safe for a folder name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", worker_id)[:64].lstrip(".") or "worker"
