"""The build-action dispatcher: a queue of actions and the workers' build slots.

A pure state machine in the style of the scheduler core: methods take events (a worker
connected, an action was queued, a lease finished, time passed) with the clock passed
in, and return instructions (start this lease on that worker, cancel that lease, fail
that operation). It does no I/O; the Workers service carries the instructions out.

Leases are per attempt. When a worker is lost (its stream broke and it did not come
back within `reconnect_grace`, or its heartbeats stopped for `heartbeat_timeout`) its
leases go back to the front of the queue with the attempt counted; after
`max_attempts` the operation fails instead. Build actions only ever take build slots:
job slots belong to the job scheduler.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from dataclasses import dataclass, field, replace

from rbs.model import Digest

# A lost worker stays visible in status this long, then is forgotten.
FORGET_LOST_S = 3600.0


class WorkerState(enum.Enum):
    CONNECTED = "CONNECTED"
    DISCONNECTED = "DISCONNECTED"
    LOST = "LOST"


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
class StartLease:
    worker_id: str
    lease_id: str
    action: QueuedAction


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelLease:
    worker_id: str
    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FailOperation:
    operation: str
    message: str


Instruction = StartLease | CancelLease | FailOperation


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerView:
    """A read-only snapshot of one worker for status displays."""

    info: WorkerInfo
    state: WorkerState
    build_slots_used: int
    last_heartbeat: float


@dataclass(slots=True)
class _Worker:
    info: WorkerInfo
    state: WorkerState
    last_heartbeat: float
    disconnected_at: float = 0.0
    leases: set[str] = field(default_factory=set)

    @property
    def free_slots(self) -> int:
        return self.info.build_slots - len(self.leases)


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    lease_id: str
    worker_id: str
    action: QueuedAction
    started: bool = False


class Dispatcher:
    """Queue and build-slot accounting; see the module docstring."""

    def __init__(
        self,
        *,
        heartbeat_timeout: float = 30.0,
        reconnect_grace: float = 10.0,
        max_attempts: int = 3,
    ) -> None:
        if heartbeat_timeout <= 0 or reconnect_grace < 0 or max_attempts < 1:
            raise ValueError(
                "heartbeat_timeout must be positive, reconnect_grace non-negative and "
                "max_attempts at least 1"
            )
        self.heartbeat_timeout = heartbeat_timeout
        self.reconnect_grace = reconnect_grace
        self.max_attempts = max_attempts
        self._queue: deque[QueuedAction] = deque()
        self._workers: dict[str, _Worker] = {}
        self._leases: dict[str, Lease] = {}
        # Leases taken back from a lost worker, kept so a late result can still be
        # matched to its operation (results are content-addressed, so a late one is
        # as good as the re-run's).
        self._retired: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._now = 0.0
        self._lease_prefix = ""

    # ------------------------------------------------------------------ queries

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return len(self._leases)

    def lease(self, lease_id: str) -> Lease | None:
        return self._leases.get(lease_id)

    def operation_of(self, lease_id: str) -> str | None:
        lease = self._leases.get(lease_id)
        return lease.action.operation if lease else self._retired.get(lease_id)

    def leases(self) -> list[Lease]:
        return list(self._leases.values())

    def workers(self) -> list[WorkerView]:
        return [
            WorkerView(
                info=w.info,
                state=w.state,
                build_slots_used=len(w.leases),
                last_heartbeat=w.last_heartbeat,
            )
            for w in sorted(self._workers.values(), key=lambda w: w.info.worker_id)
        ]

    def worker_state(self, worker_id: str) -> WorkerState | None:
        w = self._workers.get(worker_id)
        return w.state if w else None

    def set_lease_prefix(self, prefix: str) -> None:
        """Lease ids must stay unique across server restarts; the driver sets a prefix."""
        self._lease_prefix = prefix

    # ------------------------------------------------------------------ events

    def submit(self, action: QueuedAction) -> list[Instruction]:
        self._queue.append(action)
        return self._dispatch()

    def connect(
        self, info: WorkerInfo, held_leases: tuple[str, ...], now: float
    ) -> list[Instruction]:
        """A worker (re)registered. Leases it still holds stay with it; leases the server
        had given it that it no longer holds are re-queued; leases it holds that the
        server has since given to someone else are cancelled on it."""
        out: list[Instruction] = []
        w = self._workers.get(info.worker_id)
        held = set(held_leases)
        if w is None:
            w = _Worker(info=info, state=WorkerState.CONNECTED, last_heartbeat=now)
            self._workers[info.worker_id] = w
        else:
            for lease_id in sorted(w.leases - held):
                out += self._requeue(lease_id, f"worker {info.worker_id} restarted")
            w.info = info
            w.state = WorkerState.CONNECTED
            w.last_heartbeat = now
        for lease_id in sorted(held - w.leases):
            out.append(
                CancelLease(
                    worker_id=info.worker_id,
                    lease_id=lease_id,
                    reason="the lease was given to another worker while this one was away",
                )
            )
        return out + self._dispatch()

    def heartbeat(self, worker_id: str, now: float) -> None:
        w = self._workers.get(worker_id)
        if w is not None and w.state is WorkerState.CONNECTED:
            w.last_heartbeat = now

    def disconnect(self, worker_id: str, now: float) -> list[Instruction]:
        """The worker's stream ended. Its leases wait `reconnect_grace` for it to return."""
        w = self._workers.get(worker_id)
        if w is None or w.state is not WorkerState.CONNECTED:
            return []
        self._now = now
        w.state = WorkerState.DISCONNECTED
        w.disconnected_at = now
        if self.reconnect_grace == 0:
            return self._lose(w, "its stream ended")
        return []

    def started(self, lease_id: str) -> Lease | None:
        lease = self._leases.get(lease_id)
        if lease is None:
            return None
        lease = replace(lease, started=True)
        self._leases[lease_id] = lease
        return lease

    def finished(self, lease_id: str) -> list[Instruction]:
        """A lease ended (with any outcome); its slot is free again."""
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return []
        w = self._workers.get(lease.worker_id)
        if w is not None:
            w.leases.discard(lease_id)
        return self._dispatch()

    def complete(self, operation: str) -> list[Instruction]:
        """The operation has its result: drop it from the queue and cancel other
        attempts still running for it (a late result from a lost worker may win)."""
        out: list[Instruction] = []
        self._queue = deque(a for a in self._queue if a.operation != operation)
        for lease in [
            lease for lease in self._leases.values() if lease.action.operation == operation
        ]:
            out.append(
                CancelLease(
                    worker_id=lease.worker_id,
                    lease_id=lease.lease_id,
                    reason=f"{operation} already has a result",
                )
            )
            out += self.finished(lease.lease_id)
        for lease_id in [k for k, v in self._retired.items() if v == operation]:
            del self._retired[lease_id]
        return out + self._dispatch()

    def tick(self, now: float) -> list[Instruction]:
        """Time passed: workers silent too long, or away past the grace, are lost;
        workers lost for FORGET_LOST_S are forgotten."""
        self._now = now
        out: list[Instruction] = []
        for w in list(self._workers.values()):
            if w.state is WorkerState.LOST and now - w.disconnected_at > FORGET_LOST_S:
                del self._workers[w.info.worker_id]
                continue
            if w.state is WorkerState.CONNECTED and now - w.last_heartbeat > self.heartbeat_timeout:
                out += self._lose(w, f"no heartbeat for {now - w.last_heartbeat:.1f}s")
            elif (
                w.state is WorkerState.DISCONNECTED
                and now - w.disconnected_at >= self.reconnect_grace
            ):
                out += self._lose(w, f"it did not reconnect within {self.reconnect_grace:g}s")
        return out

    def restore(self, info: WorkerInfo, leases: list[Lease], now: float) -> None:
        """After a server restart: a known worker, not yet reconnected, with its leases."""
        w = _Worker(
            info=info, state=WorkerState.DISCONNECTED, last_heartbeat=now, disconnected_at=now
        )
        self._workers[info.worker_id] = w
        for lease in leases:
            self._leases[lease.lease_id] = replace(lease, worker_id=info.worker_id)
            w.leases.add(lease.lease_id)

    # ------------------------------------------------------------------ internals

    def _lose(self, w: _Worker, why: str) -> list[Instruction]:
        w.state = WorkerState.LOST
        w.disconnected_at = self._now
        out: list[Instruction] = []
        for lease_id in sorted(w.leases):
            out += self._requeue(lease_id, f"worker {w.info.worker_id} was lost: {why}")
        w.leases.clear()
        return out + self._dispatch()

    def _requeue(self, lease_id: str, why: str) -> list[Instruction]:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return []
        w = self._workers.get(lease.worker_id)
        if w is not None:
            w.leases.discard(lease_id)
        self._retired[lease_id] = lease.action.operation
        action = lease.action
        if action.attempt >= self.max_attempts:
            return [
                FailOperation(
                    operation=action.operation,
                    message=f"{why}; gave up after {action.attempt} attempt(s)",
                )
            ]
        # Re-queued work goes first: it has waited longest.
        self._queue.appendleft(replace(action, attempt=action.attempt + 1))
        return []

    def _dispatch(self) -> list[Instruction]:
        out: list[Instruction] = []
        while self._queue:
            free = [
                w
                for w in self._workers.values()
                if w.state is WorkerState.CONNECTED and w.free_slots > 0
            ]
            if not free:
                break
            # Spread load: the worker with the most free slots, ties by id for determinism.
            w = max(free, key=lambda w: (w.free_slots, w.info.worker_id))
            action = self._queue.popleft()
            lease_id = f"{self._lease_prefix}lease-{next(self._ids)}"
            self._leases[lease_id] = Lease(
                lease_id=lease_id, worker_id=w.info.worker_id, action=action
            )
            w.leases.add(lease_id)
            out.append(StartLease(worker_id=w.info.worker_id, lease_id=lease_id, action=action))
        return out
