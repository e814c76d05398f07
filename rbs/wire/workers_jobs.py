"""The Workers stream's job messages <-> typed values: leases, kills, acks and reports.

Server -> worker: `JobLease` (`JobLeaseInfo`), `KillJob` (`KillOrder`), `Ack` (`LogAck`).
Worker -> server: `JobStarted` (`JobStartedReport`), `JobFinished` (`JobFinishedReport`),
`LogLines` (`LogBatch`) and a --pty run's raw `JobOutput` (`OutputReport`). Each value carries what its message carries, with the run
named as the stream names it (job id as text, task index -1 for a job that is not an
array, the lease id `JOB[_INDEX].ATTEMPT.RANK`).

A worker must still answer a lease it cannot read, so `job_lease_from_pb` never fails:
it says what is wrong in `unreadable` (the manifest, the digest function) or
`bad_digest` (an input or checkpoint digest), and the worker fails the run with that.
On the server, a report with a malformed digest is an InvalidRequest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rbs._proto.rbs.v1 import jobs_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.cas.digests import digest_from_pb, digest_to_pb, function_from_pb, function_to_pb
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction, JobManifest, LogLine
from rbs.wire.logs import line_from_pb, line_to_pb
from rbs.wire.reapi import digest_from_proto, function_from_proto
from rbs.wire.workers import lease_manifest, manifest_to_proto


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLeaseInfo:
    """Run one node of one attempt of a job task in a job slot (JobLease)."""

    lease_id: str
    job_id: str
    manifest: JobManifest | None  # None only when `unreadable` says why
    task_index: int = -1
    attempt: int = 1
    gpu_ids: tuple[str, ...] = ()
    # The scheduler's variables on top of the manifest's env (RBS_JOB_ID, ...).
    env: tuple[tuple[str, str], ...] = ()
    node_rank: int = 0
    nodelist: tuple[str, ...] = ()
    master_addr: str = ""
    master_port: int = 0
    input_root: Digest | None = None
    # The checkpoint the previous attempt left, restored before the job starts.
    checkpoint: Digest | None = None
    unreadable: str | None = None
    bad_digest: str | None = None

    @property
    def function(self) -> DigestFunction:
        """The digest function of the run's trees: its digests', else rbs's default."""
        for d in (self.checkpoint, self.input_root):
            if d is not None:
                return d.function
        return DEFAULT_FUNCTION


@dataclass(frozen=True, slots=True, kw_only=True)
class KillOrder:
    """Stop a run (KillJob): `reason` is a KillReason value; `state` the one to report, if set."""

    lease_id: str
    job_id: str = ""
    state: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogAck:
    """The server stored a run's log lines up to and including `log_seq` (Ack)."""

    lease_id: str
    job_id: str = ""
    task_index: int = 0
    attempt: int = 0
    log_seq: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultAck:
    """The server journaled this run's JobFinished; the worker may forget the run.
    `log_seq` > 0: its log lines up to that seq are stored too (one ack for both)."""

    lease_id: str
    log_seq: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStartedReport:
    lease_id: str
    job_id: str
    task_index: int
    attempt: int
    pid: int
    started_at: float  # epoch seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFinishedReport:
    """How a run ended on its worker (JobFinished); the scheduler decides the job's state."""

    lease_id: str
    job_id: str
    task_index: int
    attempt: int
    state: str  # a JobState name, as the worker sees it (KillJob.state when it set one)
    exit_code: int
    signal: int = 0
    peak_memory_bytes: int = 0
    oom_killed: bool = False
    finished_at_ns: int  # epoch nanoseconds
    message: str = ""
    # The function of the trees below; None: not said (a run that stored nothing).
    digest_function: DigestFunction | None = None
    output_tree: Digest | None = None
    checkpoint_tree: Digest | None = None
    # The run's last unsent log lines, which ride with the result (protocol 4).
    lines: tuple[LogLine, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LogBatch:
    """A run's numbered log lines (LogLines); each line carries the run's task, attempt, rank."""

    lease_id: str
    job_id: str
    task_index: int
    attempt: int
    lines: tuple[LogLine, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class InputOrder:
    """Stdin bytes for an interactive run, its end (`eof`), or a signal number (JobInput)."""

    lease_id: str
    data: bytes = b""
    eof: bool = False
    signal: int = 0
    winsize: tuple[int, int] | None = None  # a --pty run's new (rows, cols)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputReport:
    """Raw bytes a --pty run wrote to its terminal (JobOutput), for attached clients."""

    lease_id: str
    data: bytes


JobOrder = JobLeaseInfo | KillOrder | LogAck | ResultAck | InputOrder
JobReport = JobStartedReport | JobFinishedReport | LogBatch | OutputReport


# ---------------------------------------------------------------- server -> worker


# The leases of an array's tasks carry one manifest object: its message is built once
# (kept by identity, the object with it; the JobLease constructor copies it, so the
# kept message is never changed).
_MANIFEST_PBS: dict[int, tuple[JobManifest, jobs_pb2.JobManifest]] = {}
_MANIFEST_PBS_KEPT = 64


def _manifest_pb(m: JobManifest) -> jobs_pb2.JobManifest:
    kept = _MANIFEST_PBS.get(id(m))
    if kept is not None and kept[0] is m:
        return kept[1]
    pb = manifest_to_proto(m)
    if len(_MANIFEST_PBS) >= _MANIFEST_PBS_KEPT:
        del _MANIFEST_PBS[next(iter(_MANIFEST_PBS))]  # the oldest
    _MANIFEST_PBS[id(m)] = (m, pb)
    return pb


def job_lease_to_pb(lease: JobLeaseInfo) -> w_pb2.JobLease:
    if lease.manifest is None:
        raise ValueError(f"job lease {lease.lease_id} has no manifest")
    pb = w_pb2.JobLease(
        lease_id=lease.lease_id,
        job_id=lease.job_id,
        manifest=_manifest_pb(lease.manifest),
        task_index=lease.task_index,
        attempt=lease.attempt,
        gpu_ids=list(lease.gpu_ids),
        env=dict(lease.env),
        node_rank=lease.node_rank,
        nodelist=list(lease.nodelist),
        master_addr=lease.master_addr,
        master_port=lease.master_port,
    )
    # One digest_function for both trees: the checkpoint's wins (a retry stores with it).
    if lease.input_root is not None:
        pb.input_root_digest.CopyFrom(digest_to_pb(lease.input_root))
        pb.digest_function = function_to_pb(lease.input_root.function)
    if lease.checkpoint is not None:
        pb.checkpoint_digest.CopyFrom(digest_to_pb(lease.checkpoint))
        pb.digest_function = function_to_pb(lease.checkpoint.function)
    return pb


def job_lease_from_pb(pb: w_pb2.JobLease) -> JobLeaseInfo:
    """The lease a message carries; what cannot be read is named, never raised."""
    manifest: JobManifest | None = None
    unreadable = bad_digest = None
    input_root = checkpoint = None
    try:
        manifest = _manifest_of(pb)
        fn = function_from_pb(pb.digest_function) or DEFAULT_FUNCTION
    except ValueError as e:  # ManifestDecodeError, InvalidDigest (naming the supported ones)
        manifest, unreadable = None, str(e)
    else:
        try:
            input_root = _lease_digest(pb, "input_root_digest", fn)
            checkpoint = _lease_digest(pb, "checkpoint_digest", fn)
        except ValueError as e:
            bad_digest = str(e)
    return JobLeaseInfo(
        lease_id=pb.lease_id,
        job_id=pb.job_id,
        manifest=manifest,
        task_index=pb.task_index,
        attempt=pb.attempt,
        gpu_ids=tuple(pb.gpu_ids),
        env=tuple(pb.env.items()),
        node_rank=pb.node_rank,
        nodelist=tuple(pb.nodelist),
        master_addr=pb.master_addr,
        master_port=pb.master_port,
        input_root=input_root,
        checkpoint=checkpoint,
        unreadable=unreadable,
        bad_digest=bad_digest,
    )


# The tasks of an array carry one manifest: decoded once, by its bytes. A manifest is
# frozen, so its tasks' leases can share it.
_MANIFESTS: dict[bytes, JobManifest] = {}
_MANIFESTS_KEPT = 64


def _manifest_of(pb: w_pb2.JobLease) -> JobManifest:
    if not pb.HasField("manifest"):
        return lease_manifest(pb)  # which says what is missing
    key = pb.manifest.SerializeToString()
    manifest = _MANIFESTS.get(key)
    if manifest is None:
        manifest = lease_manifest(pb)  # a bad one raises, and is decoded again next time
        if len(_MANIFESTS) >= _MANIFESTS_KEPT:
            del _MANIFESTS[next(iter(_MANIFESTS))]  # the oldest
        _MANIFESTS[key] = manifest
    return manifest


def _lease_digest(pb: w_pb2.JobLease, field: str, fn: DigestFunction) -> Digest | None:
    if not pb.HasField(field):
        return None
    d = getattr(pb, field)
    if not d.hash:
        return None
    return digest_from_pb(d, fn)


def kill_to_pb(order: KillOrder) -> w_pb2.KillJob:
    return w_pb2.KillJob(
        lease_id=order.lease_id, job_id=order.job_id, state=order.state, reason=order.reason
    )


def kill_from_pb(pb: w_pb2.KillJob) -> KillOrder:
    return KillOrder(lease_id=pb.lease_id, job_id=pb.job_id, state=pb.state, reason=pb.reason)


def input_to_pb(order: InputOrder) -> w_pb2.JobInput:
    rows, cols = order.winsize or (0, 0)
    return w_pb2.JobInput(
        lease_id=order.lease_id,
        data=order.data,
        eof=order.eof,
        signal=order.signal,
        rows=rows,
        cols=cols,
    )


def input_from_pb(pb: w_pb2.JobInput) -> InputOrder:
    winsize = (pb.rows, pb.cols) if pb.rows or pb.cols else None
    return InputOrder(
        lease_id=pb.lease_id, data=pb.data, eof=pb.eof, signal=pb.signal, winsize=winsize
    )


def output_to_pb(report: OutputReport) -> w_pb2.JobOutput:
    return w_pb2.JobOutput(lease_id=report.lease_id, data=report.data)


def output_from_pb(pb: w_pb2.JobOutput) -> OutputReport:
    return OutputReport(lease_id=pb.lease_id, data=pb.data)


def ack_to_pb(ack: LogAck) -> w_pb2.Ack:
    return w_pb2.Ack(
        job_id=ack.job_id,
        task_index=ack.task_index,
        attempt=ack.attempt,
        log_seq=ack.log_seq,
        lease_id=ack.lease_id,
    )


def result_ack_to_pb(ack: ResultAck) -> w_pb2.ResultAck:
    return w_pb2.ResultAck(lease_id=ack.lease_id, log_seq=ack.log_seq)


def result_ack_from_pb(pb: w_pb2.ResultAck) -> ResultAck:
    return ResultAck(lease_id=pb.lease_id, log_seq=pb.log_seq)


def ack_from_pb(pb: w_pb2.Ack) -> LogAck:
    return LogAck(
        lease_id=pb.lease_id,
        job_id=pb.job_id,
        task_index=pb.task_index,
        attempt=pb.attempt,
        log_seq=pb.log_seq,
    )


# ---------------------------------------------------------------- worker -> server


def job_started_to_pb(report: JobStartedReport) -> w_pb2.JobStarted:
    pb = w_pb2.JobStarted(
        lease_id=report.lease_id,
        job_id=report.job_id,
        task_index=report.task_index,
        attempt=report.attempt,
        pid=report.pid,
    )
    pb.started_at.FromNanoseconds(int(report.started_at * 1e9))
    return pb


def job_started_from_pb(pb: w_pb2.JobStarted) -> JobStartedReport:
    return JobStartedReport(
        lease_id=pb.lease_id,
        job_id=pb.job_id,
        task_index=pb.task_index,
        attempt=pb.attempt,
        pid=pb.pid,
        started_at=pb.started_at.ToNanoseconds() / 1e9,
    )


def job_finished_to_pb(report: JobFinishedReport) -> w_pb2.JobFinished:
    pb = w_pb2.JobFinished(
        lease_id=report.lease_id,
        job_id=report.job_id,
        task_index=report.task_index,
        attempt=report.attempt,
        state=report.state,
        exit_code=report.exit_code,
        signal=report.signal,
        peak_memory_bytes=report.peak_memory_bytes,
        oom_killed=report.oom_killed,
        message=report.message,
    )
    pb.finished_at.FromNanoseconds(report.finished_at_ns)
    if report.digest_function is not None:
        pb.digest_function = function_to_pb(report.digest_function)
    if report.output_tree is not None:
        pb.output_tree_digest.CopyFrom(digest_to_pb(report.output_tree))
    if report.checkpoint_tree is not None:
        pb.checkpoint_tree_digest.CopyFrom(digest_to_pb(report.checkpoint_tree))
    if report.lines:
        pb.lines.extend([line_to_pb(x) for x in report.lines])
    return pb


def job_finished_from_pb(
    pb: w_pb2.JobFinished, rank_of: Callable[[str], int] = lambda _: 0
) -> JobFinishedReport:
    """The report a message carries; a malformed digest or function is an InvalidRequest.
    Its lines are read in its run, as `log_batch_from_pb` reads a batch's."""
    fn = function_from_proto(pb.digest_function)
    output_tree = checkpoint_tree = None
    if pb.HasField("output_tree_digest") and pb.output_tree_digest.hash:
        output_tree = digest_from_proto(pb.output_tree_digest, fn, "output_tree_digest")
    if pb.HasField("checkpoint_tree_digest") and pb.checkpoint_tree_digest.hash:
        checkpoint_tree = digest_from_proto(pb.checkpoint_tree_digest, fn, "checkpoint_tree_digest")
    return JobFinishedReport(
        lease_id=pb.lease_id,
        job_id=pb.job_id,
        task_index=pb.task_index,
        attempt=pb.attempt,
        state=pb.state,
        exit_code=pb.exit_code,
        signal=pb.signal,
        peak_memory_bytes=pb.peak_memory_bytes,
        oom_killed=pb.oom_killed,
        message=pb.message,
        finished_at_ns=pb.finished_at.ToNanoseconds(),
        digest_function=fn,
        output_tree=output_tree,
        checkpoint_tree=checkpoint_tree,
        lines=_lines_of(pb.lines, pb.lease_id, pb.task_index, pb.attempt, rank_of),
    )


def log_batch_to_pb(batch: LogBatch) -> w_pb2.LogLines:
    return w_pb2.LogLines(
        job_id=batch.job_id,
        task_index=batch.task_index,
        attempt=batch.attempt,
        lease_id=batch.lease_id,
        lines=[line_to_pb(x) for x in batch.lines],
    )


def log_batch_from_pb(pb: w_pb2.LogLines, rank_of: Callable[[str], int]) -> LogBatch:
    """The batch a message carries. `rank_of` reads the rank from a lease id (the
    scheduler owns their form); a batch without one (an older worker) is rank 0's."""
    return LogBatch(
        lease_id=pb.lease_id,
        job_id=pb.job_id,
        task_index=pb.task_index,
        attempt=pb.attempt,
        lines=_lines_of(pb.lines, pb.lease_id, pb.task_index, pb.attempt, rank_of),
    )


def _lines_of(
    lines: Sequence[w_pb2.LogLine],
    lease_id: str,
    task_index: int,
    attempt: int,
    rank_of: Callable[[str], int],
) -> tuple[LogLine, ...]:
    if not lines:
        return ()
    rank = rank_of(lease_id) if lease_id else 0
    task = None if task_index < 0 else task_index
    return tuple(line_from_pb(x, task=task, attempt=attempt, rank=rank) for x in lines)


def final_batch(report: JobFinishedReport) -> LogBatch:
    """The lines a JobFinished carries, as the LogLines batch they stand for."""
    return LogBatch(
        lease_id=report.lease_id,
        job_id=report.job_id,
        task_index=report.task_index,
        attempt=report.attempt,
        lines=report.lines,
    )
