"""The events the build-action dispatcher handles: actions queued and done, worker and lease reports, time."""

from __future__ import annotations

from dataclasses import dataclass

from rbs.model import Digest


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """What a worker says about itself when it registers."""

    worker_id: str
    name: str = ""
    hostname: str = ""
    address: str = ""
    cpus: int = 1
    memory_bytes: int = 0
    gpu_ids: tuple[str, ...] = ()
    build_slots: int = 1
    job_slots: int = 0
    container_runtimes: tuple[str, ...] = ()
    version: str = ""

    def __post_init__(self) -> None:
        if not self.worker_id:
            raise ValueError("a worker must register with a non-empty worker_id")
        if self.build_slots < 0 or self.job_slots < 0:
            raise ValueError(
                f"worker {self.worker_id}: slot counts must not be negative "
                f"(build_slots={self.build_slots}, job_slots={self.job_slots})"
            )
        if self.cpus < 0 or self.memory_bytes < 0:
            raise ValueError(f"worker {self.worker_id}: cpus and memory must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedAction:
    """One REAPI action waiting for (or holding) a build slot."""

    operation: str
    action_digest: Digest
    timeout_s: float = 0.0
    attempt: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """One attempt of one action on one worker's build slot; `started` once it runs."""

    lease_id: str
    worker_id: str
    action: QueuedAction
    started: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSubmitted:
    """A new operation wants a build slot; it queues behind the actions already waiting."""

    action: QueuedAction


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConnected:
    """A worker (re)registered, holding `held_leases` from before a reconnect."""

    info: WorkerInfo
    held_leases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHeartbeat:
    """A connected worker is alive (any message from it counts)."""

    worker_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerDisconnected:
    """A worker's stream ended; its leases wait `reconnect_grace` for it to come back."""

    worker_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRestored:
    """After a server restart: a worker known before, not yet reconnected, and its leases."""

    info: WorkerInfo
    leases: tuple[Lease, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseStarted:
    """A worker began running a lease's action."""

    lease_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseFinished:
    """A lease ended with any outcome (the result travels beside the event, not in it)."""

    lease_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationCompleted:
    """An operation has its final result; its queued copies and other attempts are dropped."""

    operation: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerDraining:
    """A maintenance window or drain holds the worker (rbs.server.reservations): while
    `draining` it is leased no new build actions; the ones it runs finish."""

    worker_id: str
    draining: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchTick:
    """Time passed: silent workers, and workers away past the grace, are lost."""


DispatchEvent = (
    ActionSubmitted
    | WorkerConnected
    | WorkerHeartbeat
    | WorkerDisconnected
    | WorkerRestored
    | LeaseStarted
    | LeaseFinished
    | OperationCompleted
    | DispatchTick
    | WorkerDraining
)
