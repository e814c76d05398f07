"""The dispatcher state machine: slots, requeue on worker loss, reconnects, attempts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rbs.model import Digest
from rbs.scheduler.dispatch import (
    CancelLease,
    Dispatcher,
    FailOperation,
    QueuedAction,
    StartLease,
    WorkerInfo,
    WorkerState,
)


def _action(n: int) -> QueuedAction:
    return QueuedAction(operation=f"operations/{n}", action_digest=Digest.of(str(n).encode()))


def _worker(wid: str, slots: int = 1) -> WorkerInfo:
    return WorkerInfo(worker_id=wid, build_slots=slots, job_slots=4)


def _starts(ins: list[object]) -> list[StartLease]:
    return [i for i in ins if isinstance(i, StartLease)]


def test_actions_wait_for_build_slots_never_job_slots() -> None:
    d = Dispatcher()
    assert d.submit(_action(1)) == []
    (start,) = _starts(d.connect(_worker("w1", slots=1), (), now=0))
    assert start.action.operation == "operations/1"
    # Job slots (4) do not count: the second action waits.
    assert d.submit(_action(2)) == []
    assert d.queued == 1 and d.running == 1
    (nxt,) = _starts(d.finished(start.lease_id))
    assert nxt.action.operation == "operations/2"


def test_spreads_over_workers_with_most_free_slots() -> None:
    d = Dispatcher()
    d.connect(_worker("a", 2), (), 0)
    d.connect(_worker("b", 2), (), 0)
    workers = [s.worker_id for n in range(4) for s in _starts(d.submit(_action(n)))]
    assert sorted(workers) == ["a", "a", "b", "b"]


def test_lost_worker_leases_are_requeued_with_attempt_counted() -> None:
    d = Dispatcher(heartbeat_timeout=10, reconnect_grace=0)
    d.connect(_worker("w1"), (), 0)
    (s1,) = _starts(d.submit(_action(1)))
    d.connect(_worker("w2"), (), 0)
    d.submit(_action(2))  # goes to w2
    # w1's stream ends; with no grace it is lost at once; w2 is busy.
    assert _starts(d.disconnect("w1", 1)) == []
    assert d.worker_state("w1") is WorkerState.LOST
    assert d.queued == 1
    lease2 = next(lease for lease in d.leases() if lease.worker_id == "w2")
    (again,) = _starts(d.finished(lease2.lease_id))
    assert again.action.operation == s1.action.operation
    assert again.action.attempt == 2 and again.worker_id == "w2"
    # A late result of the old lease still names its operation.
    assert d.operation_of(s1.lease_id) == "operations/1"


def test_heartbeat_timeout_and_reconnect_grace() -> None:
    d = Dispatcher(heartbeat_timeout=10, reconnect_grace=5)
    d.connect(_worker("w1"), (), 0)
    (s,) = _starts(d.submit(_action(1)))
    d.heartbeat("w1", 8)
    assert d.tick(15) == []
    d.disconnect("w1", 16)
    assert d.tick(20) == [] and d.running == 1  # still within the grace
    # It comes back holding the lease: nothing is re-queued.
    assert d.connect(_worker("w1"), (s.lease_id,), 20) == []
    assert d.running == 1
    assert d.tick(29) == []
    assert d.tick(31) == [] and d.queued == 1  # silent > 10 s: lost, re-queued


def test_reconnect_without_the_lease_requeues_and_stale_leases_are_cancelled() -> None:
    d = Dispatcher(reconnect_grace=5)
    d.connect(_worker("w1"), (), 0)
    (s,) = _starts(d.submit(_action(1)))
    d.disconnect("w1", 1)
    ins = d.connect(_worker("w1"), ("stale-lease",), 2)
    cancels = [i for i in ins if isinstance(i, CancelLease)]
    assert [c.lease_id for c in cancels] == ["stale-lease"]
    (again,) = _starts(ins)
    assert again.action.attempt == 2 and again.lease_id != s.lease_id


def test_gives_up_after_max_attempts() -> None:
    d = Dispatcher(reconnect_grace=0, max_attempts=2)
    fails: list[FailOperation] = []
    d.submit(_action(1))
    for n in range(3):
        ins = d.connect(_worker(f"w{n}"), (), n)
        fails += [i for i in ins if isinstance(i, FailOperation)]
        fails += [i for i in d.disconnect(f"w{n}", n) if isinstance(i, FailOperation)]
    assert [f.operation for f in fails] == ["operations/1"]
    assert "2 attempt" in fails[0].message


def test_complete_cancels_other_attempts_and_drops_queued_copies() -> None:
    d = Dispatcher()
    d.connect(_worker("w1"), (), 0)
    (s,) = _starts(d.submit(_action(1)))
    ins = d.complete("operations/1")
    assert [i.lease_id for i in ins if isinstance(i, CancelLease)] == [s.lease_id]
    assert d.running == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("sfcdlt"), st.integers(0, 3)), max_size=60))
def test_invariants_under_random_events(events: list[tuple[str, int]]) -> None:
    """Slots are never oversubscribed and every action is queued, leased, or done."""
    d = Dispatcher(heartbeat_timeout=5, reconnect_grace=2, max_attempts=3)
    now, n = 0.0, 0
    submitted: set[str] = set()
    done: set[str] = set()
    for kind, arg in events:
        now += 1
        ins: list[object] = []
        if kind == "s":
            n += 1
            submitted.add(f"operations/{n}")
            ins = list(d.submit(_action(n)))
        elif kind == "c":
            ins = list(d.connect(_worker(f"w{arg}", slots=arg + 1), (), now))
        elif kind == "d":
            ins = list(d.disconnect(f"w{arg}", now))
        elif kind == "f" and d.leases():
            lease = d.leases()[arg % len(d.leases())]
            done.add(lease.action.operation)
            d.complete(lease.action.operation)
        elif kind == "t":
            ins = list(d.tick(now + arg * 3))
        done |= {i.operation for i in ins if isinstance(i, FailOperation)}
        for view in d.workers():
            assert view.build_slots_used <= view.info.build_slots
        leased = {lease.action.operation for lease in d.leases()}
        queued = {a.operation for a in d._queue}
        assert submitted == leased | queued | done
