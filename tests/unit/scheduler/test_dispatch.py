"""The dispatcher state machine: slots, requeue on worker loss, reconnects, attempts."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rbs.model import Digest
from rbs.scheduler.dispatch import ConnectionState, DispatchConfig, Dispatcher
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


def _action(n: int, attempt: int = 1) -> QueuedAction:
    return QueuedAction(
        operation=f"operations/{n}", action_digest=Digest.of(str(n).encode()), attempt=attempt
    )


def _worker(wid: str, slots: int = 1) -> WorkerInfo:
    return WorkerInfo(worker_id=wid, build_slots=slots, job_slots=4)


def _dispatcher(**config: object) -> Dispatcher:
    return Dispatcher(DispatchConfig(validate=True, **config))  # type: ignore[arg-type]


def _submit(n: int) -> ActionSubmitted:
    return ActionSubmitted(action=_action(n))


def _connect(wid: str, slots: int = 1, held: tuple[str, ...] = ()) -> WorkerConnected:
    return WorkerConnected(info=_worker(wid, slots), held_leases=held)


def _start(wid: str, lease: int, n: int, attempt: int = 1) -> StartLease:
    return StartLease(worker_id=wid, lease_id=f"lease-{lease}", action=_action(n, attempt))


def _starts(ins: list[DispatchInstruction]) -> list[StartLease]:
    return [i for i in ins if isinstance(i, StartLease)]


def test_every_event_type_has_a_handler() -> None:
    d = Dispatcher()
    with pytest.raises(TypeError, match="not a dispatch event"):
        d.handle(object(), 0)  # type: ignore[arg-type]
    assert len(get_args(DispatchEvent)) == 10


def test_actions_wait_for_build_slots_never_job_slots() -> None:
    d = _dispatcher()
    assert d.handle(_submit(1), 0) == []
    assert d.handle(_connect("w1", slots=1), 0) == [_start("w1", 1, 1)]
    # Job slots (4) do not count: the second action waits.
    assert d.handle(_submit(2), 0) == []
    assert d.queued == 1 and d.running == 1
    assert d.handle(LeaseFinished(lease_id="lease-1"), 1) == [
        DeliverResult(lease_id="lease-1", operation="operations/1"),
        _start("w1", 2, 2),
    ]


def test_started_lease_marks_its_operation_executing() -> None:
    d = _dispatcher()
    d.handle(_connect("w1"), 0)
    d.handle(_submit(1), 0)
    lease = Lease(lease_id="lease-1", worker_id="w1", action=_action(1), started=True)
    assert d.handle(LeaseStarted(lease_id="lease-1"), 1) == [MarkExecuting(lease=lease)]
    assert d.lease("lease-1") == lease
    assert d.handle(LeaseStarted(lease_id="nobody's"), 1) == []
    # A result for a lease nobody gave out is not delivered anywhere.
    assert d.handle(LeaseFinished(lease_id="nobody's"), 1) == []


def test_spreads_over_workers_with_most_free_slots() -> None:
    d = _dispatcher()
    d.handle(_connect("a", 2), 0)
    d.handle(_connect("b", 2), 0)
    workers = [s.worker_id for n in range(4) for s in _starts(d.handle(_submit(n), 0))]
    assert workers == ["b", "a", "b", "a"]


def test_lost_worker_leases_are_requeued_with_attempt_counted() -> None:
    d = _dispatcher(heartbeat_timeout=10, reconnect_grace=0)
    d.handle(_connect("w1"), 0)
    assert d.handle(_submit(1), 0) == [_start("w1", 1, 1)]
    d.handle(_connect("w2"), 0)
    assert d.handle(_submit(2), 0) == [_start("w2", 2, 2)]
    # w1's stream ends; with no grace it is lost at once; w2 is busy.
    assert d.handle(WorkerDisconnected(worker_id="w1"), 1) == [
        DropWorker(worker_id="w1", reason="its stream ended")
    ]
    assert d.connection("w1") is ConnectionState.LOST
    assert d.queue() == (_action(1, attempt=2),)
    assert d.handle(LeaseFinished(lease_id="lease-2"), 2) == [
        DeliverResult(lease_id="lease-2", operation="operations/2"),
        _start("w2", 3, 1, attempt=2),
    ]
    # A late result of the old lease still names its operation; it frees no slot.
    assert d.handle(LeaseFinished(lease_id="lease-1"), 3) == [
        DeliverResult(lease_id="lease-1", operation="operations/1")
    ]


def test_heartbeat_timeout_and_reconnect_grace() -> None:
    d = _dispatcher(heartbeat_timeout=10, reconnect_grace=5)
    d.handle(_connect("w1"), 0)
    (s,) = _starts(d.handle(_submit(1), 0))
    assert d.handle(WorkerHeartbeat(worker_id="w1"), 8) == []
    assert d.handle(DispatchTick(), 15) == []
    assert d.handle(WorkerDisconnected(worker_id="w1"), 16) == []
    assert d.handle(DispatchTick(), 20) == [] and d.running == 1  # still within the grace
    # It comes back holding the lease: nothing is re-queued.
    assert d.handle(_connect("w1", held=(s.lease_id,)), 20) == []
    assert d.running == 1
    assert d.handle(DispatchTick(), 29) == []
    # Silent > 10 s: lost, re-queued, and nobody left to take it.
    assert d.handle(DispatchTick(), 31) == [
        DropWorker(worker_id="w1", reason="no heartbeat for 11.0s")
    ]
    assert d.queued == 1 and d.connection("w1") is ConnectionState.LOST
    # A lost worker stays visible for an hour, then is forgotten.
    assert d.handle(DispatchTick(), 31 + 3600) == [] and d.connection("w1") is not None
    assert d.handle(DispatchTick(), 32 + 3600) == [] and d.connection("w1") is None


def test_away_past_the_grace_is_lost() -> None:
    d = _dispatcher(heartbeat_timeout=10, reconnect_grace=5)
    d.handle(_connect("w1"), 0)
    d.handle(_submit(1), 0)
    d.handle(WorkerDisconnected(worker_id="w1"), 1)
    assert d.handle(DispatchTick(), 6) == [
        DropWorker(worker_id="w1", reason="it did not reconnect within 5s")
    ]
    assert d.queue() == (_action(1, attempt=2),)


def test_reconnect_without_the_lease_requeues_and_stale_leases_are_cancelled() -> None:
    d = _dispatcher(reconnect_grace=5)
    d.handle(_connect("w1"), 0)
    d.handle(_submit(1), 0)
    d.handle(WorkerDisconnected(worker_id="w1"), 1)
    assert d.handle(_connect("w1", held=("stale-lease",)), 2) == [
        CancelLease(
            worker_id="w1",
            lease_id="stale-lease",
            reason="the lease was given to another worker while this one was away",
        ),
        _start("w1", 2, 1, attempt=2),
    ]


def test_gives_up_after_max_attempts() -> None:
    d = _dispatcher(reconnect_grace=0, max_attempts=2)
    out: list[DispatchInstruction] = [*d.handle(_submit(1), 0)]
    for n in range(3):
        out += d.handle(_connect(f"w{n}"), n)
        out += d.handle(WorkerDisconnected(worker_id=f"w{n}"), n)
    fails = [i for i in out if isinstance(i, FailOperation)]
    assert fails == [
        FailOperation(
            operation="operations/1",
            message="worker w1 was lost: its stream ended; gave up after 2 attempt(s)",
        )
    ]
    assert d.queued == 0 and d.running == 0


def test_complete_cancels_other_attempts_and_drops_queued_copies() -> None:
    d = _dispatcher()
    d.handle(_connect("w1"), 0)
    d.handle(_submit(1), 0)
    d.handle(_submit(1), 0)  # a second copy, queued behind the first
    d.handle(_submit(2), 0)
    # The freed slot goes to the next other operation, not the dropped copy.
    assert d.handle(OperationCompleted(operation="operations/1"), 1) == [
        CancelLease(worker_id="w1", lease_id="lease-1", reason="operations/1 already has a result"),
        _start("w1", 2, 2),
    ]
    assert d.queued == 0 and d.running == 1


def test_restored_worker_keeps_its_leases_until_the_grace_ends() -> None:
    d = _dispatcher(reconnect_grace=5)
    lease = Lease(lease_id="old-lease-7", worker_id="elsewhere", action=_action(1))
    assert d.handle(WorkerRestored(info=_worker("w1"), leases=(lease,)), 100) == []
    assert d.lease("old-lease-7") == replace(lease, worker_id="w1")
    assert d.connection("w1") is ConnectionState.DISCONNECTED
    # It reconnects holding the lease: it keeps it and gets nothing more.
    assert d.handle(_connect("w1", held=("old-lease-7",)), 101) == []
    assert d.running == 1


def test_invariant_violation_is_reported() -> None:
    d = _dispatcher()
    d.handle(_connect("w1"), 0)
    d.handle(_submit(1), 0)
    d._leases.clear()  # corrupt the state: the worker still holds the lease
    with pytest.raises(InvariantError, match="lease-1"):
        d.handle(WorkerHeartbeat(worker_id="w1"), 1)


_EVENT_KINDS = "sfcdltbrg"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_EVENT_KINDS), st.integers(0, 3)), max_size=60))
# Two workers go silent together: the first one's requeued action must not be leased to
# the second, which the same tick finds silent too.
@example(events=[("s", 0), ("c", 0), ("c", 1), ("t", 2)])
def test_invariants_under_random_events(events: list[tuple[str, int]]) -> None:
    """Slots are never oversubscribed and every action is queued, leased, or done; the
    dispatcher's own invariants (validate mode) hold after every step."""
    d = _dispatcher(heartbeat_timeout=5, reconnect_grace=2, max_attempts=3)
    now, n = 0.0, 0
    submitted: set[str] = set()
    done: set[str] = set()
    for kind, arg in events:
        now += 1
        event: DispatchEvent | None = None
        if kind == "s":
            n += 1
            submitted.add(f"operations/{n}")
            event = _submit(n)
        elif kind == "c":
            event = _connect(f"w{arg}", slots=arg + 1)
        elif kind == "d":
            event = WorkerDisconnected(worker_id=f"w{arg}")
        elif kind == "f" and d.leases():
            lease = d.leases()[arg % len(d.leases())]
            done.add(lease.action.operation)
            event = OperationCompleted(operation=lease.action.operation)
        elif kind == "l" and d.leases():
            event = LeaseStarted(lease_id=d.leases()[arg % len(d.leases())].lease_id)
        elif kind == "t":
            now += arg * 3
            event = DispatchTick()
        elif kind == "b":
            event = WorkerHeartbeat(worker_id=f"w{arg}")
        elif kind == "g":  # a maintenance window holds a worker, or lets it go
            event = WorkerDraining(worker_id=f"w{arg % 3}", draining=arg < 2)
        elif kind == "r" and d.leases():
            # A lease ends without its operation finishing (the driver then completes it).
            lease = d.leases()[arg % len(d.leases())]
            ins = d.handle(LeaseFinished(lease_id=lease.lease_id), now)
            assert ins[0] == DeliverResult(
                lease_id=lease.lease_id, operation=lease.action.operation
            )
            done.add(lease.action.operation)
            event = OperationCompleted(operation=lease.action.operation)
        if event is None:
            continue
        ins = d.handle(event, now)
        done |= {i.operation for i in ins if isinstance(i, FailOperation)}
        for view in d.workers():
            assert view.build_slots_used <= view.info.build_slots
        for start in _starts(ins):
            assert d.connection(start.worker_id) is ConnectionState.CONNECTED
        leased = {lease.action.operation for lease in d.leases()}
        queued = {a.operation for a in d.queue()}
        assert submitted == leased | queued | done
