"""The build-action dispatcher: `Dispatcher.handle(event, now) -> instructions`, pure and deterministic.

The second core of the scheduler package, in the shape of the job core (`core.py`): the
driver (the server's worker hub) passes events in (`dispatch_events`) with the clock, and
carries the instructions out (`dispatch_instructions`): start a lease on a worker, cancel
one, fail an operation, drop a lost worker. It does no I/O; each event type has one
registered handler; with `validate` the invariants are checked after every step.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, get_args

from rbs.scheduler.dispatch_events import (
    ActionSubmitted,
    DispatchEvent,
    DispatchTick,
    Lease,
    LeaseFinished,
    LeaseStarted,
    OperationCompleted,
    QueuedAction,
    WorkerConnected,
    WorkerDisconnected,
    WorkerDraining,
    WorkerHeartbeat,
    WorkerInfo,
    WorkerRestored,
)
from rbs.scheduler.dispatch_instructions import (
    CancelLease,
    DeliverResult,
    DispatchInstruction,
    DropWorker,
    FailOperation,
    MarkExecuting,
    StartLease,
)
from rbs.scheduler.state import InvariantError

# A lost worker stays visible in status this long, then is forgotten.
FORGET_LOST_S = 3600.0


class ConnectionState(enum.Enum):
    """Where a worker's stream stands, as the dispatcher sees it."""

    CONNECTED = "CONNECTED"
    DISCONNECTED = "DISCONNECTED"
    LOST = "LOST"


@dataclass(frozen=True, slots=True, kw_only=True)
class DispatchConfig:
    """Liveness and retry settings; `lease_prefix` keeps lease ids unique across restarts."""

    heartbeat_timeout: float = 30.0
    reconnect_grace: float = 10.0
    max_attempts: int = 3
    lease_prefix: str = ""
    validate: bool = False

    def __post_init__(self) -> None:
        if self.heartbeat_timeout <= 0 or self.reconnect_grace < 0 or self.max_attempts < 1:
            raise ValueError(
                "heartbeat_timeout must be positive, reconnect_grace non-negative and "
                "max_attempts at least 1"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerView:
    """A read-only snapshot of one worker for status displays."""

    info: WorkerInfo
    state: ConnectionState
    build_slots_used: int
    last_heartbeat: float


@dataclass(slots=True)
class _Worker:
    info: WorkerInfo
    state: ConnectionState
    last_heartbeat: float
    disconnected_at: float = 0.0
    leases: set[str] = field(default_factory=set)
    draining: bool = False  # in a maintenance window or drained: no new leases

    @property
    def free_slots(self) -> int:
        return 0 if self.draining else self.info.build_slots - len(self.leases)


_Handler = Callable[[Any], list[DispatchInstruction]]


class Dispatcher:
    """Queue and build-slot accounting as a pure state machine; see the module docstring."""

    def __init__(self, config: DispatchConfig | None = None) -> None:
        self.config = config or DispatchConfig()
        self._queue: deque[QueuedAction] = deque()
        self._workers: dict[str, _Worker] = {}
        self._leases: dict[str, Lease] = {}
        # Leases taken back from a lost worker, kept so a late result can still be
        # matched to its operation (results are content-addressed, so a late one is
        # as good as the re-run's).
        self._retired: dict[str, str] = {}
        self._ids = itertools.count(1)
        self._now = 0.0
        # One handler per event type, registered here and nowhere else.
        self._handlers: Mapping[type, _Handler] = {
            ActionSubmitted: self._submitted,
            WorkerConnected: self._connected,
            WorkerHeartbeat: self._heartbeat,
            WorkerDisconnected: self._disconnected,
            WorkerRestored: self._restored,
            LeaseStarted: self._started,
            LeaseFinished: self._finished,
            OperationCompleted: self._completed,
            DispatchTick: self._tick,
            WorkerDraining: self._draining,
        }
        assert set(self._handlers) == set(get_args(DispatchEvent))

    # ---- driving

    def handle(self, event: DispatchEvent, now: float) -> list[DispatchInstruction]:
        """Apply one event at time `now`; returns what the driver must do, in order."""
        handler = self._handlers.get(type(event))
        if handler is None:
            raise TypeError(f"not a dispatch event: {event!r}")
        self._now = now
        out = handler(event)
        if self.config.validate:
            self.check_invariants()
        return out

    # ---- queries

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return len(self._leases)

    def queue(self) -> tuple[QueuedAction, ...]:
        """The waiting actions, next first."""
        return tuple(self._queue)

    def lease(self, lease_id: str) -> Lease | None:
        return self._leases.get(lease_id)

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

    def connection(self, worker_id: str) -> ConnectionState | None:
        w = self._workers.get(worker_id)
        return w.state if w else None

    # ---- handlers

    def _submitted(self, ev: ActionSubmitted) -> list[DispatchInstruction]:
        self._queue.append(ev.action)
        return self._dispatch()

    def _connected(self, ev: WorkerConnected) -> list[DispatchInstruction]:
        """Leases the worker still holds stay with it; leases the server had given it that
        it no longer holds are re-queued; leases it holds that the server has since given
        to someone else are cancelled on it."""
        info, now = ev.info, self._now
        out: list[DispatchInstruction] = []
        w = self._workers.get(info.worker_id)
        held = set(ev.held_leases)
        if w is None:
            w = _Worker(info=info, state=ConnectionState.CONNECTED, last_heartbeat=now)
            self._workers[info.worker_id] = w
        else:
            for lease_id in sorted(w.leases - held):
                out += self._requeue(lease_id, f"worker {info.worker_id} restarted")
            w.info = info
            w.state = ConnectionState.CONNECTED
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

    def _draining(self, ev: WorkerDraining) -> list[DispatchInstruction]:
        w = self._workers.get(ev.worker_id)
        if w is None or w.draining == ev.draining:
            return []
        w.draining = ev.draining
        return self._dispatch()  # resumed: its free slots take the queue's head

    def _heartbeat(self, ev: WorkerHeartbeat) -> list[DispatchInstruction]:
        w = self._workers.get(ev.worker_id)
        if w is not None and w.state is ConnectionState.CONNECTED:
            w.last_heartbeat = self._now
        return []

    def _disconnected(self, ev: WorkerDisconnected) -> list[DispatchInstruction]:
        w = self._workers.get(ev.worker_id)
        if w is None or w.state is not ConnectionState.CONNECTED:
            return []
        w.state = ConnectionState.DISCONNECTED
        w.disconnected_at = self._now
        if self.config.reconnect_grace == 0:
            return self._lose([(w, "its stream ended")])
        return []

    def _restored(self, ev: WorkerRestored) -> list[DispatchInstruction]:
        now = self._now
        w = _Worker(
            info=ev.info,
            state=ConnectionState.DISCONNECTED,
            last_heartbeat=now,
            disconnected_at=now,
        )
        self._workers[ev.info.worker_id] = w
        for lease in ev.leases:
            self._leases[lease.lease_id] = replace(lease, worker_id=ev.info.worker_id)
            w.leases.add(lease.lease_id)
        return []

    def _started(self, ev: LeaseStarted) -> list[DispatchInstruction]:
        lease = self._leases.get(ev.lease_id)
        if lease is None:
            return []
        lease = replace(lease, started=True)
        self._leases[ev.lease_id] = lease
        return [MarkExecuting(lease=lease)]

    def _finished(self, ev: LeaseFinished) -> list[DispatchInstruction]:
        lease = self._leases.get(ev.lease_id)
        operation = lease.action.operation if lease else self._retired.get(ev.lease_id)
        if operation is None:
            return []  # unknown lease: the driver ignores its result
        return [
            DeliverResult(lease_id=ev.lease_id, operation=operation),
            *self._release(ev.lease_id),
        ]

    def _completed(self, ev: OperationCompleted) -> list[DispatchInstruction]:
        """Drop the operation from the queue and cancel other attempts still running for
        it (a late result from a lost worker may win)."""
        operation = ev.operation
        out: list[DispatchInstruction] = []
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
            out += self._release(lease.lease_id)
        for lease_id in [k for k, v in self._retired.items() if v == operation]:
            del self._retired[lease_id]
        return out + self._dispatch()

    def _tick(self, ev: DispatchTick) -> list[DispatchInstruction]:
        """Workers silent too long, or away past the grace, are lost; workers lost for
        FORGET_LOST_S are forgotten."""
        now, cfg = self._now, self.config
        lost: list[tuple[_Worker, str]] = []
        for w in list(self._workers.values()):
            if w.state is ConnectionState.LOST and now - w.disconnected_at > FORGET_LOST_S:
                del self._workers[w.info.worker_id]
                continue
            if (
                w.state is ConnectionState.CONNECTED
                and now - w.last_heartbeat > cfg.heartbeat_timeout
            ):
                lost.append((w, f"no heartbeat for {now - w.last_heartbeat:.1f}s"))
            elif (
                w.state is ConnectionState.DISCONNECTED
                and now - w.disconnected_at >= cfg.reconnect_grace
            ):
                lost.append((w, f"it did not reconnect within {cfg.reconnect_grace:g}s"))
        return self._lose(lost) if lost else []

    # ---- internals

    def _release(self, lease_id: str) -> list[DispatchInstruction]:
        """A lease ended (with any outcome); its slot is free again."""
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return []
        w = self._workers.get(lease.worker_id)
        if w is not None:
            w.leases.discard(lease_id)
        return self._dispatch()

    def _lose(self, lost: list[tuple[_Worker, str]]) -> list[DispatchInstruction]:
        """Workers are lost together: all are marked before any action is requeued, so a
        requeued action never goes to a worker that this same step finds silent."""
        for w, _ in lost:
            w.state = ConnectionState.LOST
            w.disconnected_at = self._now
        out: list[DispatchInstruction] = []
        for w, why in lost:
            for lease_id in sorted(w.leases):
                out += self._requeue(lease_id, f"worker {w.info.worker_id} was lost: {why}")
            w.leases.clear()
        out += self._dispatch()
        return out + [DropWorker(worker_id=w.info.worker_id, reason=why) for w, why in lost]

    def _requeue(self, lease_id: str, why: str) -> list[DispatchInstruction]:
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return []
        w = self._workers.get(lease.worker_id)
        if w is not None:
            w.leases.discard(lease_id)
        self._retired[lease_id] = lease.action.operation
        action = lease.action
        if action.attempt >= self.config.max_attempts:
            return [
                FailOperation(
                    operation=action.operation,
                    message=f"{why}; gave up after {action.attempt} attempt(s)",
                )
            ]
        # Re-queued work goes first: it has waited longest.
        self._queue.appendleft(replace(action, attempt=action.attempt + 1))
        return []

    def _dispatch(self) -> list[DispatchInstruction]:
        out: list[DispatchInstruction] = []
        while self._queue:
            free = [
                w
                for w in self._workers.values()
                if w.state is ConnectionState.CONNECTED and w.free_slots > 0
            ]
            if not free:
                break
            # Spread load: the worker with the most free slots, ties by id for determinism.
            w = max(free, key=lambda w: (w.free_slots, w.info.worker_id))
            action = self._queue.popleft()
            lease_id = f"{self.config.lease_prefix}lease-{next(self._ids)}"
            self._leases[lease_id] = Lease(
                lease_id=lease_id, worker_id=w.info.worker_id, action=action
            )
            w.leases.add(lease_id)
            out.append(StartLease(worker_id=w.info.worker_id, lease_id=lease_id, action=action))
        return out

    # ---- invariants

    def check_invariants(self) -> None:
        """Raise InvariantError if the state breaks a rule; O(state), for tests and validate mode."""
        for lease_id, lease in self._leases.items():
            _require(lease.lease_id == lease_id, f"lease {lease_id} filed under another id")
            w = self._workers.get(lease.worker_id)
            _require(
                w is not None and lease_id in w.leases,
                f"lease {lease_id} is not held by its worker {lease.worker_id}",
            )
            _require(lease_id not in self._retired, f"lease {lease_id} is both live and retired")
        for wid, w in self._workers.items():
            _require(w.info.worker_id == wid, f"worker {wid} filed under another id")
            for lease_id in w.leases:
                held = self._leases.get(lease_id)
                _require(
                    held is not None and held.worker_id == wid,
                    f"worker {wid} holds lease {lease_id} the dispatcher gave elsewhere or not at all",
                )
            if w.state is ConnectionState.LOST:
                _require(not w.leases, f"worker {wid} is lost but still holds leases")
        for action in self._queue:
            _require(
                action.attempt >= 1, f"{action.operation} queued with attempt {action.attempt}"
            )
        if self._queue:
            # Work-conserving: nothing waits while a connected worker has a free build slot.
            idle = [
                wid
                for wid, w in self._workers.items()
                if w.state is ConnectionState.CONNECTED and w.free_slots > 0
            ]
            _require(not idle, f"{len(self._queue)} action(s) wait while {idle} have free slots")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvariantError(message)
