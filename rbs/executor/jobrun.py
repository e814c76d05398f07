"""One job lease's blocking work, on a thread of the job host: folders, inputs, process, outputs.

Everything a run does to files and processes happens in `execute`, in one trip to a
worker thread, so the worker's event loop (which also carries the gRPC stream for
every run) only ships log lines and reports. Log lines, the host's own notes
included, go through the spool and then the `sink`, in seq order.

Kills race with the start safely: the host sets `LeaseRun.kill` then reads
`LeaseRun.runner`; this thread sets `runner` then reads `kill`; whichever comes second
sees the other's write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rbs.cas.errors import CasError
from rbs.cas.store import BlobStore
from rbs.executor import jobfiles
from rbs.executor.cgroup_base import CgroupBackend
from rbs.executor.jobfiles import CollectedTrees, RunDirs
from rbs.executor.joblog import LogSink, LogSpool
from rbs.executor.jobproc import JobRunner
from rbs.executor.jobship import LogShipper
from rbs.executor.jobspec import JobOutcome, JobSpec
from rbs.executor.lease import PGID_FILE
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction, JobManifest, KillReason, LogStream
from rbs.wire.workers_jobs import JobFinishedReport, JobLeaseInfo

log = logging.getLogger(__name__)


class LeaseRun:
    """One lease on this worker, from its arrival until it is reported and acknowledged."""

    def __init__(self, lease: JobLeaseInfo, dirs: RunDirs) -> None:
        self.lease = lease
        self.dirs = dirs
        self.spool: LogSpool | None = None
        self.shipper: LogShipper | None = None
        self.runner: JobRunner | None = None
        self.task: asyncio.Task[None] | None = None
        self.slot_wait: asyncio.Future[bool] | None = None
        self.has_slot = False
        self.kill: tuple[KillReason, str, str] | None = None  # reason, message, state
        self.start_reported = False
        self.finished: JobFinishedReport | None = None
        self.finished_sent = False
        self.finished_acked = False  # the server journaled it (ResultAck)

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    @property
    def held(self) -> bool:
        """Whether the scheduler must keep this run with this worker: until the server
        says it journaled the run's end."""
        return not self.finished_acked


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSetup:
    """What every run on one worker shares."""

    store: BlobStore
    backend: CgroupBackend
    hostname: str
    grace_s: float
    env: Mapping[str, str] | None = None
    prefetch: Callable[[Digest], None] | None = None
    record_pgid: bool = False  # for the lease watchdog (rbs.executor.lease)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How a run ended: an outcome when its process ran, else `problem` or a kill."""

    outcome: JobOutcome | None = None
    trees: CollectedTrees = field(default_factory=CollectedTrees)
    problem: str | None = None
    function: DigestFunction = DEFAULT_FUNCTION


def execute(run: LeaseRun, host: HostSetup, sink: LogSink) -> RunResult:
    """Set up, run and clean up one lease (blocking; call on a thread)."""
    lease, dirs = run.lease, run.dirs
    dirs.root.mkdir(parents=True, exist_ok=True)
    spool = run.spool = LogSpool(dirs.spool)

    def note(text: str) -> None:
        sink(spool.append([(LogStream.SYS, text, True)]))

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
        )
        for text in notes:
            note(text)
        if manifest.time_limit:
            from rbs.units import format_duration

            note(
                f"time limit {format_duration(manifest.time_limit)}, enforced by the scheduler: "
                f"SIGTERM, then SIGKILL {host.grace_s:g}s later"
            )
        spec = job_spec(lease, manifest, dirs, host)
    except (CasError, OSError, ValueError) as e:
        return RunResult(problem=f"cannot prepare the job: {e}", function=fn)
    runner = run.runner = JobRunner(
        spec, spool=spool, backend=host.backend, sink=sink, hostname=host.hostname
    )
    if host.record_pgid:
        runner.pgid_file = dirs.root / PGID_FILE
    if run.kill is not None:
        runner.kill(run.kill[0], run.kill[1])
    outcome = runner.run()
    trees = CollectedTrees()
    if manifest.outputs or manifest.checkpoint_dir:
        try:
            trees = jobfiles.collect(
                host.store,
                dirs.work,
                outputs=manifest.outputs,
                checkpoint_dir=manifest.checkpoint_dir,
                function=fn,
            )
        except (CasError, OSError, ValueError) as e:
            log.warning("lease %s: storing outputs failed: %s", run.lease_id, e)
            trees = CollectedTrees(notes=(f"storing the job's outputs failed: {e}",))
    for text in trees.notes:
        note(text)
    jobfiles.remove(dirs.work)
    jobfiles.remove(dirs.tmp)
    return RunResult(outcome=outcome, trees=trees, function=fn)


def job_spec(lease: JobLeaseInfo, manifest: JobManifest, dirs: RunDirs, host: HostSetup) -> JobSpec:
    env = jobfiles.base_env(dirs, host.env)
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
