"""One job lease's blocking work around its process: folders and inputs, then outputs.

A run has three phases. `prepare` (on a worker thread) makes its folders, copies its
inputs and checkpoint out of the CAS, writes its first sys lines to the log spool, and
returns the `RunSpec` the run supervisor starts. The supervisor owns the spool while
the process runs. Once it has exited, `finish` (on a thread when the job declares
outputs, else inline) writes the last notes and stores the outputs and the checkpoint
as trees. The work folder stays until the server has the result (a daemon restarted
before that collects the outputs again from it). Here too: the report a run ends
with (`report`), from the supervisor's `Exited`.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rbs.cas.errors import CasError
from rbs.cas.store import BlobStore
from rbs.executor import jobfiles, jobsecrets
from rbs.executor.containers import ContainerEngine
from rbs.executor.jobfiles import CollectedTrees, RunDirs
from rbs.executor.joblog import LogSink, LogSpool, LogSpoolError
from rbs.executor.jobship import LogShipper, RawBudget
from rbs.executor.jobspec import JobOutcome, JobSpec
from rbs.executor.podman_service import EngineError
from rbs.executor.run_input import InputGate
from rbs.executor.runfolders import Made, RunFolders
from rbs.executor.runuser import RunUsers, as_spec
from rbs.executor.supervisor_proto import Exited, Input, RunInfo, RunSpec, SignalRun
from rbs.model import (
    DEFAULT_FUNCTION,
    DigestFunction,
    JobManifest,
    JobState,
    KillReason,
    LogStream,
)
from rbs.wire.workers_jobs import (
    InputOrder,
    JobFinishedReport,
    JobLeaseInfo,
    JobReport,
    KillOrder,
)

log = logging.getLogger(__name__)

# The exit code reported for a run whose process could not be started at all (its
# inputs could not be materialized, its program was not found): like `docker run`'s 125.
START_FAILED_EXIT = 125


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


def kill_request(kill: KillOrder) -> tuple[KillReason, str, str]:
    """A KillJob as (reason, the log's words, the state to report)."""
    try:
        reason = KillReason(kill.reason)
        why = reason.words
    except ValueError:  # none given, or one this worker does not know
        reason, why = KillReason.CANCEL, kill.reason or "killed"
    state = _KILL_STATES.get(reason, JobState.CANCELLED).value
    return reason, f"{why} (scheduler)", kill.state or state


class LeaseRun:
    """One lease on this worker, from its arrival until it is reported and acknowledged."""

    def __init__(self, lease: JobLeaseInfo, dirs: RunDirs) -> None:
        self.lease = lease
        self.dirs = dirs
        self.spool: LogSpool | None = None
        self.shipper: LogShipper | None = None
        self.task: asyncio.Task[None] | None = None
        self.slot_wait: asyncio.Future[bool] | None = None
        self.has_slot = False
        self.kill: tuple[KillReason, str, str] | None = None  # reason, message, state
        # Set once the supervisor was asked to start it; its Exited resolves `exited`.
        self.exited: asyncio.Future[Exited] | None = None
        self.pid: int | None = None
        self.start_reported = False
        self.finished: JobFinishedReport | None = None
        self.finished_sent = False
        self.finished_acked = False  # the server journaled it (ResultAck)
        manifest = lease.manifest
        self.outputs: tuple[str, ...] = manifest.outputs if manifest is not None else ()
        self.checkpoint_dir = manifest.checkpoint_dir if manifest is not None else None
        self.function: DigestFunction = lease.function
        self.raw = RawBudget()  # a --pty run's terminal output to the server
        self.inputs = InputGate()  # an interactive run's input, held until it started

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    @property
    def held(self) -> bool:
        """Whether the scheduler must keep this run with this worker: until the server
        says it journaled the run's end."""
        return not self.finished_acked

    @property
    def live(self) -> bool:
        """Started in the supervisor and not yet exited."""
        return self.exited is not None and not self.exited.done()

    def close(self) -> None:
        """Let go of the log: its shipper's buffer and timer, its spool's fd."""
        if self.shipper is not None:
            self.shipper.close()
        if self.spool is not None:
            self.spool.close()

    def owner(self) -> dict[str, Any]:
        """What the supervisor keeps for a restarted daemon to report this run."""
        return {
            "job_id": self.lease.job_id,
            "task_index": self.lease.task_index,
            "attempt": self.lease.attempt,
            "outputs": list(self.outputs),
            "checkpoint_dir": self.checkpoint_dir,
            "function": self.function.value,
        }

    @classmethod
    def reattached(cls, lease_id: str, owner: Mapping[str, Any], dirs: RunDirs) -> LeaseRun:
        """A run a previous daemon started, rebuilt from what the supervisor kept."""
        lease = JobLeaseInfo(
            lease_id=lease_id,
            job_id=str(owner["job_id"]),
            manifest=None,
            task_index=int(owner["task_index"]),
            attempt=int(owner["attempt"]),
            unreadable="re-attached after a worker restart",
        )
        run = cls(lease, dirs)
        run.outputs = tuple(owner.get("outputs") or ())
        run.checkpoint_dir = owner.get("checkpoint_dir")
        run.function = DigestFunction(owner.get("function") or DEFAULT_FUNCTION.value)
        return run


def reattach(
    info: RunInfo,
    root: Path,
    send: Callable[[JobReport], None],
    connected: Callable[[], bool],
) -> LeaseRun | None:
    """A run the supervisor holds for a previous daemon, with its log read from the
    spool from the last acknowledged seq; None (logged) when it cannot be read back."""
    spec = info.spec
    dirs = RunDirs(root=root / spec.lease_id)
    try:
        run = LeaseRun.reattached(spec.lease_id, spec.owner, dirs)
        run.spool = LogSpool(dirs.spool, writable=False)
    except (KeyError, ValueError, TypeError, LogSpoolError) as e:
        log.error("cannot re-attach run %s: %s; it is left to stop", spec.lease_id, e)
        return None
    run.shipper = LogShipper(run.lease, run.spool, send=send, connected=connected)
    run.shipper.sent = run.shipper.acked = min(info.acked, run.shipper.last)
    run.pid = info.pid
    run.start_reported = True  # a previous daemon did, or its JobFinished will say
    run.inputs.open = True  # started: its input goes on at once
    run.exited = asyncio.get_running_loop().create_future()
    if info.exited is not None:
        run.exited.set_result(info.exited)
    run.has_slot = True
    return run


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSetup:
    """What every run on one worker shares."""

    store: BlobStore
    hostname: str
    grace_s: float
    env: Mapping[str, str] | None = None
    prefetch: Callable[[Any], None] | None = None
    users: RunUsers | None = None  # runs under uids of their own (rbs.executor.runuser)
    containers: ContainerEngine | None = None  # the engine of container jobs, if any
    folders: RunFolders | None = None  # free run folders to reuse (rbs.executor.runfolders)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How a run ended: an outcome when its process ran, else `problem` or a kill."""

    outcome: JobOutcome | None = None
    trees: CollectedTrees = field(default_factory=CollectedTrees)
    problem: str | None = None
    function: DigestFunction = DEFAULT_FUNCTION


def prepare(run: LeaseRun, host: HostSetup, sink: LogSink) -> RunSpec | RunResult:
    """Folders, inputs, first notes (blocking; call on a thread): the spec to start, or
    the result of a run that cannot start (its spool then open for the report's note)."""
    dirs = run.dirs
    if host.folders is not None:
        made = host.folders.make(dirs)
    else:
        made = Made.NEW if jobfiles.make_root(dirs) else Made.EARLIER
    # A new or reused folder's spool is empty: opened only for a note, else the
    # supervisor makes it. An earlier try's goes on from its last line.
    if made is Made.EARLIER or host.users is not None:
        run.spool = LogSpool(dirs.spool)
    if host.users is not None:  # the run may pass through, not read its log or list
        os.chmod(dirs.spool, 0o600)
        os.chmod(dirs.root, 0o711)
    try:
        result = _prepare(run, host, sink, made)
    except BaseException:
        _open_spool(run)  # for the failure's note
        raise
    if isinstance(result, RunResult):
        _open_spool(run)
        return result
    # The supervisor appends from here on; this side only reads until the run exits.
    if run.spool is None:
        run.spool = LogSpool.view(dirs.spool)
    else:
        run.spool.close()
        run.spool = run.spool.reader()
    return result


def _open_spool(run: LeaseRun) -> LogSpool:
    if run.spool is None:
        run.spool = LogSpool(run.dirs.spool)
    return run.spool


def _prepare(run: LeaseRun, host: HostSetup, sink: LogSink, made: Made) -> RunSpec | RunResult:
    lease, dirs = run.lease, run.dirs

    def note(text: str) -> None:
        sink(_open_spool(run).append([(LogStream.SYS, text, True)]))

    manifest = lease.manifest
    if manifest is None or lease.unreadable is not None:
        return RunResult(problem=f"cannot read the job lease: {lease.unreadable}")
    fn = lease.function
    if run.kill is not None:
        note(f"{run.kill[1]} before the job started; not starting it")
        return RunResult(function=fn)
    if lease.bad_digest is not None:
        return RunResult(problem=f"cannot prepare the job: {lease.bad_digest}", function=fn)
    try:
        notes = jobfiles.prepare(
            host.store,
            dirs,
            input_root=lease.input_root,
            checkpoint=lease.checkpoint,
            checkpoint_dir=manifest.checkpoint_dir,
            prefetch=host.prefetch,
            fresh=made is Made.NEW,
            made=made is Made.REUSED,
        )
        for text in notes:
            note(text)
        if manifest.time_limit:
            from rbs.units import format_duration

            note(
                f"time limit {format_duration(manifest.time_limit)}, enforced by the scheduler: "
                f"SIGTERM, then SIGKILL {host.grace_s:g}s later"
            )
        spec = run_spec(run, job_spec(lease, manifest, dirs, host), host.users, manifest.time_limit)
        if manifest.container is not None:
            if host.containers is None:
                raise EngineError("this worker has no container runtime (--containers none)")
            spec, line = host.containers.prepare(spec, manifest.container, manifest.network)
            note(line)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            where = f"the worker's work dir {dirs.root.parent.parent} is full"
            return RunResult(problem=f"cannot prepare the job: {where} ({e})", function=fn)
        return RunResult(problem=f"cannot prepare the job: {e}", function=fn)
    except (CasError, ValueError, EngineError) as e:
        return RunResult(problem=f"cannot prepare the job: {e}", function=fn)
    return spec


def run_spec(
    run: LeaseRun, spec: JobSpec, users: RunUsers | None = None, time_limit_s: int | None = None
) -> RunSpec:
    """The supervisor's view of a job process (`time_limit_s`: the scheduler's, for its log)."""
    task = f" task {spec.task_id}" if spec.task_id is not None else ""
    env, secrets = jobsecrets.split(spec.final_env())
    return RunSpec(
        lease_id=run.lease_id,
        argv=spec.argv,
        env=env,
        secrets=secrets,
        cwd=str(spec.workdir),
        spool=str(run.dirs.spool),
        key=spec.key,
        title=f"job {spec.job_id}{task} attempt {spec.attempt}",
        cpus=spec.cpus,
        memory_bytes=spec.memory_bytes,
        pids_max=spec.pids_max,
        gpus=spec.gpu_ids,
        grace_s=spec.grace_s,
        time_limit_s=time_limit_s,
        max_line_chars=spec.max_line_chars,
        owner=run.owner(),
        users=as_spec(users, run.dirs.tmp) if users is not None else None,
        stdin=run.lease.manifest is not None and run.lease.manifest.interactive,
        pty=run.lease.manifest is not None and run.lease.manifest.pty and run.lease.node_rank == 0,
        **pinning(run.lease.manifest),
    )


def input_message(order: InputOrder) -> Input | SignalRun:
    """An interactive run's JobInput as the supervisor's request."""
    if order.signal:
        return SignalRun(lease_id=order.lease_id, signal=order.signal)
    data = base64.b64encode(order.data).decode()
    return Input(lease_id=order.lease_id, data=data, eof=order.eof, winsize=order.winsize)


def pinning(m: JobManifest | None) -> dict[str, Any]:
    """A manifest's --cpu-cores and --max-iobps as RunSpec fields."""
    if m is None:
        return {}
    return {"cpu_set": m.cpu_cores or None, "io_bps": m.max_iobps}


def finish(run: LeaseRun, store: BlobStore, exited: Exited, sink: LogSink) -> RunResult:
    """Store the outputs and checkpoint of an exited run and note it in its log."""
    trees = CollectedTrees()
    if run.outputs or run.checkpoint_dir:
        try:
            trees = jobfiles.collect(
                store,
                run.dirs.work,
                outputs=run.outputs,
                checkpoint_dir=run.checkpoint_dir,
                function=run.function,
            )
        except (CasError, OSError, ValueError) as e:
            log.warning("lease %s: storing outputs failed: %s", run.lease_id, e)
            trees = CollectedTrees(notes=(f"storing the job's outputs failed: {e}",))
    if trees.notes:
        try:
            if run.spool is not None:
                run.spool.close()
            spool = run.spool = LogSpool(run.dirs.spool)  # the supervisor has let go of it
            sink(spool.append([(LogStream.SYS, text, True) for text in trees.notes]))
        except OSError as e:  # a full work dir: the job's own lines are all in already
            log.warning("lease %s: notes not logged (%s): %s", run.lease_id, e, trees.notes)
    return RunResult(outcome=outcome_of(exited), trees=trees, function=run.function)


def outcome_of(exited: Exited) -> JobOutcome:
    try:
        reason = KillReason(exited.kill_reason) if exited.kill_reason else None
    except ValueError:
        reason = KillReason.NODE_FAIL
    return JobOutcome(
        state=JobState(exited.state),
        exit_code=exited.exit_code,
        signal=exited.signal,
        kill_reason=reason,
        peak_memory_bytes=exited.peak_memory_bytes,
        oom_kills=exited.oom_kills,
        cpu_time_s=exited.cpu_time_s,
        started_at=exited.started_at,
        ended_at=exited.ended_at or time.time(),
        cgroup=exited.cgroup,
        error=exited.error,
    )


def job_spec(lease: JobLeaseInfo, manifest: JobManifest, dirs: RunDirs, host: HostSetup) -> JobSpec:
    env = jobfiles.base_env(dirs, host.env)
    if host.users is not None:  # the worker's HOME and name are not the run's user's
        env["HOME"] = str(dirs.work)
        for name in ("USER", "LOGNAME"):
            env.pop(name, None)
    scheduler_env = dict(lease.env)
    env.update(scheduler_env)  # the scheduler's variables are complete and win
    res = manifest.resources
    return JobSpec(
        job_id=lease.job_id,
        argv=manifest.command,
        workdir=dirs.work,
        env=env,
        task_id=scheduler_env.get("RBS_TASK_ID") if lease.task_index >= 0 else None,
        attempt=max(1, lease.attempt),
        cpus=res.cpu_millis / 1000,
        memory_bytes=res.memory_bytes,
        gpu_ids=tuple(lease.gpu_ids),
        time_limit_s=None,  # the scheduler enforces it with KillJob(reason="timeout")
        grace_s=host.grace_s,
        outputs=(),  # collected by jobfiles.collect, into one tree
    )


def report(run: LeaseRun, result: RunResult, sys_note: Callable[[str], None]) -> JobFinishedReport:
    """The JobFinished of a run that ended as `result` says."""
    outcome = result.outcome
    if result.problem is not None:
        sys_note(result.problem)
        return finished(run.lease, JobState.FAILED.value, START_FAILED_EXIT, message=result.problem)
    if outcome is None:  # killed before it started
        reason = run.kill[1] if run.kill else "killed before it started"
        state = (run.kill[2] if run.kill else "") or JobState.CANCELLED.value
        return finished(run.lease, state, 0, message=reason)
    state = outcome.state.value
    if run.kill is not None and outcome.kill_reason is not None and run.kill[2]:
        state = run.kill[2]
    if outcome.error is not None:
        code, sig = START_FAILED_EXIT, 0
    elif outcome.signal is not None:
        code, sig = 128 + outcome.signal, outcome.signal
    else:
        code, sig = outcome.exit_code or 0, 0
    return finished(
        run.lease,
        state,
        code,
        signal=sig,
        peak=outcome.peak_memory_bytes or 0,
        oom=outcome.oom_kills > 0,
        message="" if outcome.state is JobState.COMPLETED else outcome.describe(),
        trees=result,
    )


def finished(
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
