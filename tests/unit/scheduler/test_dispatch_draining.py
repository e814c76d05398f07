"""The dispatcher leases no new build actions to a draining worker, and resumes it."""

from __future__ import annotations

from rbs.model import Digest
from rbs.scheduler.dispatch import DispatchConfig, Dispatcher
from rbs.scheduler.dispatch_events import (
    ActionSubmitted,
    LeaseFinished,
    QueuedAction,
    WorkerConnected,
    WorkerDraining,
    WorkerInfo,
)
from rbs.scheduler.dispatch_instructions import StartLease


def _submit(n: int) -> ActionSubmitted:
    action = QueuedAction(operation=f"operations/{n}", action_digest=Digest.of(str(n).encode()))
    return ActionSubmitted(action=action)


def _connect(wid: str) -> WorkerConnected:
    return WorkerConnected(info=WorkerInfo(worker_id=wid, build_slots=1, job_slots=1))


def starts(out: list[object]) -> list[str]:
    return [i.worker_id for i in out if isinstance(i, StartLease)]


def test_a_draining_worker_takes_no_new_actions_and_its_running_one_finishes() -> None:
    d = Dispatcher(DispatchConfig(validate=True))
    d.handle(_connect("a"), 0.0)
    d.handle(_connect("b"), 0.0)
    (first,) = [i for i in d.handle(_submit(1), 1.0) if isinstance(i, StartLease)]
    busy = first.worker_id
    idle = "b" if busy == "a" else "a"
    assert d.handle(WorkerDraining(worker_id=idle, draining=True), 2.0) == []
    assert d.handle(WorkerDraining(worker_id=busy, draining=True), 2.0) == []
    assert starts(d.handle(_submit(2), 3.0)) == []  # both held: it waits in the queue
    assert d.queued == 1
    d.handle(LeaseFinished(lease_id=first.lease_id), 4.0)  # it runs to its end
    assert d.queued == 1
    assert starts(d.handle(WorkerDraining(worker_id=idle, draining=False), 5.0)) == [idle]
    assert d.queued == 0
