"""Paged listings over the journal: every page walk gives the filter's jobs once, in order."""

from __future__ import annotations

from pathlib import Path

import pytest
from sched_harness import manifest, starts, worker_up

from rbs.model import ACTIVE_STATES, JobState
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Cancel, Submit, TaskExited, TaskRef, TaskStarted
from rbs.scheduler.journal_query import JobFilter, PageKey
from rbs.scheduler.store import Store
from rbs.wire.specs import parse_array

CONFIG = SchedulerConfig(
    heartbeat_timeout=1e9,
    age_interval=10.0,
    age_max=50,
    queues=(QueueConfig(name="batch"), QueueConfig(name="gpu", priority_weight=7)),
)
ALL = frozenset(JobState)


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """120 jobs: two queues, three users, a few arrays, some cancelled, some run to the end."""
    store = Store(tmp_path_factory.mktemp("journal") / "jobs.db", durable=False)
    sched = Scheduler(CONFIG, validate=True)
    now = 1000.0
    for i in range(120):
        m = manifest(
            name=f"big-{i}" if i % 5 == 0 else f"job-{i}",
            queue="gpu" if i % 3 == 0 else "batch",
            priority=(i * 7) % 11,
            res=(1, 1, 0),
            array=parse_array("0-2") if i % 17 == 0 else None,
            begin_time=None if i < 100 else 1e10,  # the last ones wait: never started
        )
        parent = 2 if i in (30, 31, 77) else None  # jobs job 2's runs submitted
        store.step(sched, [Submit(manifest=m, user=f"u{i % 3}", parent=parent)], now + i)
    out = store.step(sched, [worker_up("w1", cpus=2, slots=2)], now + 200)
    # Two runs start and end (COMPLETED, FAILED); a few jobs are cancelled.
    for k, st in enumerate(starts(out)):
        run = st.run
        store.step(sched, [TaskStarted(run=run, worker_id="w1")], now + 201)
        exited = TaskExited(run=run, worker_id="w1", exit_code=k * 3)
        store.step(sched, [exited], now + 202)
    cancel = Cancel(targets=tuple(TaskRef(job_id=j, index=None) for j in (7, 8, 9, 50)))
    store.step(sched, [cancel], now + 203)
    return store


def _walk(store: Store, f: JobFilter, sort: str, desc: bool, limit: int) -> list[tuple]:
    q = store.query()
    rows: list[tuple] = []
    after = None
    for _ in range(1000):
        page, more = q.page(
            f, sort=sort, descending=desc, after=after, limit=limit, config=CONFIG, now=2000.0
        )
        rows += page
        if not more:
            return rows
        assert len(page) == limit
        after = PageKey(value=page[-1][0], job_id=page[-1][1])
    raise AssertionError("the walk did not end")


def _all_rows(store: Store) -> list[tuple[int, str, str, str, int, float]]:
    db = store._db  # the test reads the same rows the queries do
    return db.execute(
        "SELECT id, state, queue, name, json_extract(body, '$.user'), submit_time FROM jobs"
    ).fetchall()


@pytest.mark.parametrize("limit", [1, 7, 50, 1000])
@pytest.mark.parametrize("desc", [False, True])
def test_paging_by_id_visits_each_matching_job_once_in_order(
    journal: Store, limit: int, desc: bool
) -> None:
    for states in (ACTIVE_STATES, ALL, frozenset({JobState.CANCELLED, JobState.COMPLETED})):
        f = JobFilter(states=states)
        ids = [r[1] for r in _walk(journal, f, "id", desc, limit)]
        want = sorted((r[0] for r in _all_rows(journal) if JobState(r[1]) in states), reverse=desc)
        assert ids == want
        assert journal.query().count(f) == len(want)


def test_the_journal_holds_the_states_the_walk_is_about(journal: Store) -> None:
    states = {JobState(r[1]) for r in _all_rows(journal)}
    assert {JobState.PENDING, JobState.RUNNING, JobState.CANCELLED} <= states
    assert JobState.COMPLETED in states or JobState.FAILED in states


def test_filters_match_queue_user_name_glob_and_arrays(journal: Store) -> None:
    rows = _all_rows(journal)
    cases = [
        (JobFilter(states=ALL, queue="gpu"), [r[0] for r in rows if r[2] == "gpu"]),
        (JobFilter(states=ALL, user="u1"), [r[0] for r in rows if r[4] == "u1"]),
        (JobFilter(states=ALL, name="big-*"), [r[0] for r in rows if r[3].startswith("big-")]),
        (JobFilter(states=ALL, name="job-4"), [r[0] for r in rows if r[3] == "job-4"]),
        (JobFilter(states=ALL, array=True), [1, 18, 35, 52, 69, 86, 103, 120]),
        (
            JobFilter(states=ACTIVE_STATES, queue="batch", user="u2"),
            [
                r[0]
                for r in rows
                if r[2] == "batch" and r[4] == "u2" and JobState(r[1]) in ACTIVE_STATES
            ],
        ),
    ]
    for f, want in cases:
        assert want, f
        assert [r[1] for r in _walk(journal, f, "id", False, 9)] == sorted(want), f
        assert journal.query().count(f) == len(want), f
    assert journal.query().count(JobFilter(states=ALL, user="nobody")) == 0
    assert [r[1] for r in _walk(journal, JobFilter(states=ALL, parent=2), "id", False, 2)] == [
        31,
        32,
        78,
    ]
    assert journal.query().count(JobFilter(states=ALL, parent=3)) == 0
    assert len(_walk(journal, JobFilter(states=ALL, array=False), "id", False, 50)) == 112


@pytest.mark.parametrize("sort", ["submit", "state", "priority"])
def test_other_sorts_page_in_key_then_id_order(journal: Store, sort: str) -> None:
    for desc in (False, True):
        rows = _walk(journal, JobFilter(states=ALL), sort, desc, 13)
        keys = [(r[0], r[1]) for r in rows]
        assert keys == sorted(keys, reverse=desc)
        assert len({r[1] for r in rows}) == len(rows) == 120


def test_state_sort_follows_the_state_order_not_the_alphabet(journal: Store) -> None:
    rows = _walk(journal, JobFilter(states=ALL), "state", False, 1000)
    order = [JobState(s) for _, _, s in rows]
    assert order[0] is JobState.PENDING
    firsts = list(dict.fromkeys(order))
    assert firsts == sorted(firsts, key=list(JobState).index)


def test_priority_is_the_schedulers_arithmetic(journal: Store) -> None:
    """base + queue weight + whole age steps since eligible (until it ended), at most age_max."""
    rows = _walk(journal, JobFilter(states=ALL), "priority", True, 1000)
    for value, job_id, _ in rows:
        rec = journal.job_record(job_id)
        assert rec is not None
        weight = 7 if rec.manifest.queue == "gpu" else 0
        age = 0
        if rec.eligible_time is not None:
            until = rec.end_time if rec.end_time is not None else 2000.0
            age = max(0, min(50, int(until // 10) - int(rec.eligible_time // 10)))
        assert value == rec.manifest.priority + weight + age, job_id


def _plan(store: Store, f: JobFilter, sort: str) -> str:
    """The query plan of the page query JournalQuery runs for `f` (as it ran it)."""
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    try:
        store.query().page(
            f, sort=sort, descending=False, after=None, limit=5, config=CONFIG, now=2000.0
        )
    finally:
        store._db.set_trace_callback(None)
    (sql,) = [s for s in seen if s.startswith("SELECT")]
    return " / ".join(str(r[3]) for r in store._db.execute("EXPLAIN QUERY PLAN " + sql))


def test_the_default_listing_walks_the_active_index_without_sorting(journal: Store) -> None:
    """Active jobs in id order never read an ended row nor sort: one page, then it stops."""
    plan = _plan(journal, JobFilter(states=ACTIVE_STATES), "id")
    assert "jobs_active" in plan and "TEMP B-TREE" not in plan, plan
    plan = _plan(journal, JobFilter(states=frozenset({JobState.CANCELLED})), "id")
    assert "jobs_state" in plan and "TEMP B-TREE" not in plan, plan
    plan = _plan(journal, JobFilter(states=ALL, queue="gpu"), "id")
    assert "jobs_queue" in plan and "TEMP B-TREE" not in plan, plan
    plan = _plan(journal, JobFilter(states=ALL, parent=2), "id")
    assert "jobs_parent" in plan and "TEMP B-TREE" not in plan, plan


def test_a_filter_names_a_state() -> None:
    with pytest.raises(ValueError, match="at least one state"):
        JobFilter(states=frozenset())


def test_an_old_journal_gains_the_indexes(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "jobs.db"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX jobs_active")
    db.commit()
    db.close()
    Store(path).close()
    names = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master")}
    assert {"jobs_active", "jobs_queue", "jobs_name", "jobs_submit", "jobs_user"} <= names
    assert "jobs_parent" in names
