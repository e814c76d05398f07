"""Job owners in the core and the journal: who submitted, who cancelled, child-job caps."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sched_harness import Harness, manifest, starts

from rbs.model import JobState
from rbs.scheduler.config import SchedulerConfig, load_scheduler_config
from rbs.scheduler.events import Cancel, RunRef, Submit, TaskRef
from rbs.scheduler.instructions import Accepted, Rejected
from rbs.scheduler.store import Store


def _submit(h: Harness, user: str, parent: int | None = None) -> Accepted | Rejected:
    out = h.send(Submit(manifest=manifest(), user=user, parent=parent))
    (answer,) = [i for i in out if isinstance(i, Accepted | Rejected)]
    return answer


def test_a_job_records_who_submitted_it_and_who_cancelled_it() -> None:
    h = Harness()
    acc = _submit(h, "alice")
    assert isinstance(acc, Accepted)
    assert h.sched.job(acc.job_id).user == "alice"
    assert h.sched.job(acc.job_id).changes == ()
    h.send(Cancel(targets=(TaskRef(job_id=acc.job_id),), by="root"), at=5.0)
    view = h.sched.job(acc.job_id)
    assert view.state is JobState.CANCELLED
    assert [(c.action, c.by, c.at) for c in view.changes] == [("cancel", "root", 5.0)]
    # A cancel of an ended job changes nothing and is not recorded.
    h.send(Cancel(targets=(TaskRef(job_id=acc.job_id),), by="bob"))
    assert len(h.sched.job(acc.job_id).changes) == 1


def test_a_task_cancel_names_the_task() -> None:
    h = Harness()
    h.up("w1")
    from rbs.wire.specs import parse_array

    jid = h.submit(manifest(array=parse_array("0-3")))
    h.send(Cancel(targets=(TaskRef(job_id=jid, index=2),), by="carol"))
    assert [c.action for c in h.sched.job(jid).changes] == [f"cancel {jid}_2"]


def test_child_jobs_are_capped_per_parent() -> None:
    h = Harness(SchedulerConfig(heartbeat_timeout=1e9, max_child_jobs=2))
    parent = _submit(h, "alice")
    assert isinstance(parent, Accepted)
    for _ in range(2):
        assert isinstance(_submit(h, "alice", parent=parent.job_id), Accepted)
    refused = _submit(h, "alice", parent=parent.job_id)
    assert isinstance(refused, Rejected)
    assert "max_child_jobs" in refused.message and f"job {parent.job_id}" in refused.message
    # Another parent has a budget of its own.
    other = _submit(h, "bob")
    assert isinstance(other, Accepted)
    assert isinstance(_submit(h, "bob", parent=other.job_id), Accepted)


def test_the_child_cap_is_a_config_key() -> None:
    assert load_scheduler_config({"max_child_jobs": 7}).max_child_jobs == 7
    assert SchedulerConfig().max_child_jobs == 100


def test_run_user_holds_only_while_the_run_has_not_exited() -> None:
    h = Harness()
    h.up("w1")
    acc = _submit(h, "dave")
    assert isinstance(acc, Accepted)
    (start,) = starts(h.last)
    run = start.run
    assert h.sched.run_user(run) == "dave"
    assert h.sched.run_user(RunRef(job_id=run.job_id, attempt=2)) is None
    assert h.sched.run_user(RunRef(job_id=run.job_id, rank=1)) is None
    h.exit(run.job_id)
    assert h.sched.run_user(run) is None


def test_owners_and_child_counts_survive_a_restart(tmp_path: Path) -> None:
    cfg = SchedulerConfig(heartbeat_timeout=1e9, max_child_jobs=1)
    store = Store(tmp_path / "jobs.db")
    h = Harness(cfg)
    h.sched = store.restore(cfg, 0.0)
    parent = h.send(Submit(manifest=manifest(), user="erin"))
    store.apply(parent, 0.0)
    (acc,) = [i for i in parent if isinstance(i, Accepted)]
    child = h.send(Submit(manifest=manifest(), user="erin", parent=acc.job_id))
    store.apply(child, 0.0)
    cancel = h.send(Cancel(targets=(TaskRef(job_id=acc.job_id),), by="root"))
    store.apply(cancel, 0.0)
    again = store.restore(cfg, 1.0)
    assert again.job(acc.job_id).user == "erin"
    assert [c.by for c in again.job(acc.job_id).changes] == ["root"]
    assert again.job(acc.job_id + 1).parent == acc.job_id
    h.sched = again
    refused = _submit(h, "erin", parent=acc.job_id)
    assert isinstance(refused, Rejected)
    store.close()


def test_jobs_journaled_before_owners_show_unknown(tmp_path: Path) -> None:
    store = Store(tmp_path / "jobs.db")
    h = Harness()
    out = h.send(Submit(manifest=manifest(), user="frank"))
    store.apply(out, 0.0)
    store.close()
    # A row as an older rbs wrote it: no user, parent or changes in its body.
    db = sqlite3.connect(tmp_path / "jobs.db")
    (body,) = db.execute("SELECT body FROM jobs WHERE id = 1").fetchone()
    old = {k: v for k, v in json.loads(body).items() if k not in ("user", "parent", "changes")}
    db.execute("UPDATE jobs SET body = ? WHERE id = 1", (json.dumps(old),))
    db.commit()
    db.close()
    store = Store(tmp_path / "jobs.db")
    view = store.restore(None, 1.0).job(1)
    assert (view.user, view.parent, view.changes) == ("unknown", None, ())
    store.close()
