"""The Workers stream's build-action messages <-> typed values: leases, cancels, reports.

Server -> worker: `ActionLease` (`ActionLeaseInfo`) and `CancelAction` (`CancelOrder`).
Worker -> server: `ActionStarted` (`ActionStartedReport`) and `ActionFinished`, which the
worker writes from an `ActionFinishedReport` and the server reads as a
`ReceivedActionResult`: there the REAPI status and result stay messages, because the
Execution engine checks, caches and serves them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import duration_pb2
from google.rpc import status_pb2
from grpc import StatusCode

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.cas.digests import digest_from_pb, digest_to_pb, function_from_pb, function_to_pb
from rbs.cas.errors import InvalidDigest
from rbs.model import Digest
from rbs.wire.actions import ActionResultInfo, action_result_to_pb


def duration_to_pb(seconds: float) -> duration_pb2.Duration:
    """A duration in seconds as the stream carries it (whole seconds, then nanoseconds)."""
    return duration_pb2.Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionLeaseInfo:
    """Run one REAPI action in a build slot (ActionLease).

    `action_digest` is None when the worker cannot read it (an unset or unsupported
    digest function, a malformed digest); `problem` then says why, and the worker
    reports the action INVALID_ARGUMENT instead of running it.
    """

    lease_id: str
    operation_name: str
    action_digest: Digest | None
    timeout_s: float = 0.0  # the action's own or the server's default; 0: none
    attempt: int = 1
    problem: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOrder:
    """Stop the action of a lease (CancelAction)."""

    lease_id: str
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionStartedReport:
    lease_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionFinishedReport:
    """How a worker's action ended: a status as REAPI states it, and the (maybe partial) result."""

    lease_id: str
    code: StatusCode
    message: str = ""
    result: ActionResultInfo = field(default_factory=ActionResultInfo)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ReceivedActionResult:
    """An ActionFinished as the server reads it; status and result are the REAPI messages."""

    lease_id: str
    status: status_pb2.Status
    result: re_pb2.ActionResult


# ---------------------------------------------------------------- server -> worker


def action_lease_to_pb(lease: ActionLeaseInfo) -> w_pb2.ActionLease:
    if lease.action_digest is None:
        raise ValueError(f"action lease {lease.lease_id} has no action digest")
    return w_pb2.ActionLease(
        lease_id=lease.lease_id,
        operation_name=lease.operation_name,
        action_digest=digest_to_pb(lease.action_digest),
        digest_function=function_to_pb(lease.action_digest.function),
        timeout=duration_to_pb(lease.timeout_s),
        attempt=lease.attempt,
    )


def action_lease_from_pb(pb: w_pb2.ActionLease) -> ActionLeaseInfo:
    digest: Digest | None = None
    problem = ""
    try:
        fn = function_from_pb(pb.digest_function)
    except InvalidDigest:  # unsupported: like unset, `problem` says so
        fn = None
    if fn is None:
        problem = f"digest function {pb.digest_function} is not supported by this worker"
    else:
        try:
            digest = digest_from_pb(pb.action_digest, fn)
        except InvalidDigest as e:
            problem = f"action_digest: {e}"
    return ActionLeaseInfo(
        lease_id=pb.lease_id,
        operation_name=pb.operation_name,
        action_digest=digest,
        timeout_s=pb.timeout.ToTimedelta().total_seconds(),
        attempt=pb.attempt,
        problem=problem,
    )


def cancel_to_pb(order: CancelOrder) -> w_pb2.CancelAction:
    return w_pb2.CancelAction(lease_id=order.lease_id, reason=order.reason)


def cancel_from_pb(pb: w_pb2.CancelAction) -> CancelOrder:
    return CancelOrder(lease_id=pb.lease_id, reason=pb.reason)


# ---------------------------------------------------------------- worker -> server


def action_started_to_pb(report: ActionStartedReport) -> w_pb2.ActionStarted:
    return w_pb2.ActionStarted(lease_id=report.lease_id)


def action_started_from_pb(pb: w_pb2.ActionStarted) -> ActionStartedReport:
    return ActionStartedReport(lease_id=pb.lease_id)


def action_finished_to_pb(report: ActionFinishedReport) -> w_pb2.ActionFinished:
    return w_pb2.ActionFinished(
        lease_id=report.lease_id,
        # gRPC's codes are google.rpc's: the number is the same.
        status=status_pb2.Status(code=report.code.value[0], message=report.message),
        result=action_result_to_pb(report.result),
    )


def action_finished_from_pb(pb: w_pb2.ActionFinished) -> ReceivedActionResult:
    return ReceivedActionResult(lease_id=pb.lease_id, status=pb.status, result=pb.result)
