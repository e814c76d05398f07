"""Endings and their reasons, the restart budget after worker loss, deadlines, true pending reasons."""

from __future__ import annotations

from sched_harness import GIB, Harness, starts

from rbs.model import JobState
from rbs.scheduler.events import Requeue, TaskRef
from rbs.scheduler.instructions import Note, SaveTask


def notes(out: list[object]) -> list[Note]:
    return [i for i in out if isinstance(i, Note)]


def test_a_restart_after_worker_loss_writes_a_note_counting_the_attempts() -> None:
    h = Harness()
    h.up("vm-a", slots=1)
    jid = h.submit()
    h.up("vm-b", slots=1)
    out = h.down("vm-a")
    (note,) = notes(out)
    assert (note.job_id, note.index, note.attempt) == (jid, None, 1)
    assert note.text == "worker vm-a lost; restarting on another worker (attempt 2 of 11)"
    (lost,) = [i.record for i in out if isinstance(i, SaveTask) and i.record.attempt == 1]
    assert lost.state is JobState.NODE_FAIL and lost.reason == "worker_lost vm-a"
    (start,) = starts(out)
    assert start.worker_id == "vm-b" and start.run.attempt == 2


def test_restarts_cap_requeues_and_the_job_ends_node_fail_saying_why() -> None:
    h = Harness()
    for w in ("a", "b", "c"):
        h.up(w, slots=1)
    jid = h.submit(restarts=2)
    texts = []
    for _ in range(3):
        (worker,) = h.sched.job(jid).workers
        texts += [n.text for n in notes(h.down(worker))]
    assert texts[0].endswith("(attempt 2 of 3)") and texts[1].endswith("(attempt 3 of 3)")
    assert "not restarting: its 2 restarts are used up (--restarts 2)" in texts[2]
    view = h.sched.job(jid)
    assert view.state is JobState.NODE_FAIL and view.reason is not None
    assert view.reason.startswith("worker_lost") and view.attempts == 3


def test_restarts_zero_is_no_requeue() -> None:
    h = Harness()
    h.up("a")
    jid = h.submit(restarts=0)
    (note,) = notes(h.down("a"))
    assert "--no-requeue (--restarts 0)" in note.text
    assert h.state(jid) is JobState.NODE_FAIL and h.reason(jid) == "worker_lost a"


def test_preemption_spends_neither_restarts_nor_retries() -> None:
    h = Harness()
    h.up("w")
    h.up("v")
    jid = h.submit(restarts=1, max_retries=0)
    for attempt in (1, 2, 3):
        h.send(Requeue(targets=(TaskRef(job_id=jid),), preempt=True))
        h.exit(jid, attempt=attempt, code=143, signal=15)
    assert h.sched.job(jid).attempts == 4 and h.state(jid) is JobState.RUNNING
    (worker,) = h.sched.job(jid).workers
    (note,) = notes(h.down(worker))
    assert note.text.endswith("(attempt 5 of 5)")  # the one restart is still there


def test_endings_carry_their_reason() -> None:
    h = Harness()
    h.up("w", slots=4)
    failed = h.submit()
    h.exit(failed, code=3)
    assert (h.state(failed), h.reason(failed)) == (JobState.FAILED, "exit 3")
    killed = h.submit()
    h.exit(killed, code=137, signal=9)
    assert h.reason(killed) == "signal 9 (SIGKILL)"
    oom = h.submit(res=(1, 1, 0))
    h.exit(oom, code=137, signal=9, oom=True, peak_memory_bytes=GIB)
    assert h.reason(oom) == "oom at peak 1.0 GiB (limit 1.0 GiB)"
    slow = h.submit(time_limit=60)
    h.tick(at=61.0)
    h.exit(slow, code=143, signal=15)
    assert (h.state(slow), h.reason(slow)) == (JobState.TIMEOUT, "time limit 1m")
    ok = h.submit()
    h.exit(ok)
    assert h.reason(ok) is None


def test_cancel_names_who_asked() -> None:
    h = Harness()
    jid = h.submit()  # no worker: pending
    from rbs.scheduler.events import Cancel

    h.send(Cancel(targets=(TaskRef(job_id=jid),), by="alice"))
    assert (h.state(jid), h.reason(jid)) == (JobState.CANCELLED, "cancelled by alice")


def test_an_array_reason_counts_its_tasks_and_names_the_highest_code() -> None:
    from rbs.wire.specs import parse_array

    h = Harness()
    h.up("w", slots=4)
    jid = h.submit(array=parse_array("0-3"))
    for i, code in enumerate((0, 2, 5, 0)):
        h.exit(jid, index=i, code=code)
    view = h.sched.job(jid)
    assert view.state is JobState.FAILED and view.exit_code == 5
    assert view.reason == "2 of 4 tasks FAILED, highest exit 5"


def test_a_deadline_cancels_a_job_not_started_by_then() -> None:
    h = Harness()
    late = h.submit(deadline=100.0)
    assert h.reason(late) == "NoWorkers"
    h.tick(at=99.0)
    assert h.state(late) is JobState.PENDING
    h.tick(at=100.0)
    assert (h.state(late), h.reason(late)) == (JobState.CANCELLED, "DeadlineExpired")


def test_a_deadline_leaves_a_started_job_alone() -> None:
    h = Harness()
    h.up("w")
    jid = h.submit(deadline=100.0)
    h.tick(at=200.0)
    assert h.state(jid) is JobState.RUNNING


def test_no_worker_at_all_is_the_pending_reason_then_priority_rules_again() -> None:
    h = Harness()
    jid = h.submit()
    assert h.reason(jid) == "NoWorkers"
    h.up("w", slots=1, cpus=1)
    h.submit(res=(1, 1, 0))
    waiting = h.submit(res=(1, 1, 0))
    assert h.reason(waiting) != "NoWorkers"


def test_the_age_bonus_stops_growing_when_a_job_ends() -> None:
    from rbs.scheduler.config import SchedulerConfig

    h = Harness(SchedulerConfig(heartbeat_timeout=1e9, age_interval=10, age_max=1000))
    h.up("w")
    jid = h.submit()
    h.tick(at=50.0)
    h.exit(jid)
    ended = h.sched.job(jid).priority.age_bonus
    h.tick(at=500.0)
    assert h.sched.job(jid).priority.age_bonus == ended == 5
