"""What the build-action dispatcher asks its driver to do: send and cancel leases, report to operations."""

from __future__ import annotations

from dataclasses import dataclass

from rbs.scheduler.dispatch_events import Lease, QueuedAction


@dataclass(frozen=True, slots=True, kw_only=True)
class StartLease:
    """Send this action down the worker's stream as lease `lease_id`; its operation is QUEUED there."""

    worker_id: str
    lease_id: str
    action: QueuedAction

    @property
    def lease(self) -> Lease:
        return Lease(lease_id=self.lease_id, worker_id=self.worker_id, action=self.action)


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelLease:
    """Tell the worker to stop and drop a lease it holds."""

    worker_id: str
    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FailOperation:
    """The operation ran out of attempts: finish it with `message` as its error."""

    operation: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkExecuting:
    """The lease's action runs now: its operation moves to EXECUTING."""

    lease: Lease


@dataclass(frozen=True, slots=True, kw_only=True)
class DeliverResult:
    """The result reported for `lease_id` belongs to `operation` (also a late one from a lost worker).

    The driver holds the result itself (it is a wire message) and hands it to the operation.
    """

    lease_id: str
    operation: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DropWorker:
    """The worker is lost: end its stream if it is still open, and tell the job scheduler."""

    worker_id: str
    reason: str


DispatchInstruction = (
    StartLease | CancelLease | FailOperation | MarkExecuting | DeliverResult | DropWorker
)
