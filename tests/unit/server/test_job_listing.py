"""Listing pages and journal views: what `GET /v1/jobs` and `show` answer from the journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rbs.model import JobManifest, JobState, Resources
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Cancel, Submit, TaskExited, TaskRef, TaskStarted, WorkerUp
from rbs.scheduler.instructions import Instruction, Start
from rbs.scheduler.journal_query import PageKey
from rbs.scheduler.store import Store
from rbs.server.job_listing import JobListing, decode_cursor, encode_cursor
from rbs.server.job_records import record_view
from rbs.wire import jobs_api
from rbs.wire.errors import InvalidRequest
from rbs.wire.jobs_api_requests import list_params
from rbs.wire.specs import parse_array, parse_dependencies

CONFIG = SchedulerConfig(
    heartbeat_timeout=1e9,
    age_interval=10.0,
    queues=(QueueConfig(name="batch"), QueueConfig(name="gpu", priority_weight=7)),
)
NOW = 1300.0


def manifest(**kw: Any) -> JobManifest:
    return JobManifest(command=("true",), resources=Resources(cpu_millis=1000), **kw)


def worker_up(wid: str) -> WorkerUp:
    return WorkerUp(
        worker_id=wid,
        hostname=wid,
        address="10.0.0.1",
        cpu_millis=4000,
        memory_bytes=16 << 30,
        gpus=(),
        job_slots=4,
    )


def starts(out: list[Instruction]) -> list[Start]:
    return [i for i in out if isinstance(i, Start)]


class Driver:
    """The parts of JobDriver a JobListing reads."""

    def __init__(self, store: Store, sched: Scheduler) -> None:
        self.store = store
        self.sched = sched
        self.config = CONFIG

    def state_of(self, job_id: int) -> JobState:
        return self.sched.job(job_id).state


@pytest.fixture
def driver(tmp_path: Path) -> Driver:
    store = Store(tmp_path / "jobs.db", durable=False)
    sched = Scheduler(CONFIG, validate=True)
    t = 1000.0
    for i in range(30):
        deps = parse_dependencies(f"afterany:{i}") if i in (5, 6) else ()
        m = manifest(
            name=f"j{i}",
            queue="gpu" if i % 2 else "batch",
            priority=i % 4,
            array=parse_array("0-3") if i == 3 else None,
            dependencies=deps,
        )
        store.step(sched, [Submit(manifest=m, user="ann" if i < 10 else "bob")], t + i)
    out = store.step(sched, [worker_up("w1")], t + 100)
    for _ in range(3):  # three rounds of runs end (the array's tasks among them); the rest wait
        started = starts(out)
        out = []
        for st in started:
            store.step(sched, [TaskStarted(run=st.run, worker_id="w1")], t + 101)
            code = 2 if st.run.job_id % 3 == 0 else 0
            exited = TaskExited(run=st.run, worker_id="w1", exit_code=code)
            out += store.step(sched, [exited], t + 102)
    cancel = Cancel(targets=tuple(TaskRef(job_id=j, index=None) for j in (20, 21, 4)), by="ann")
    store.step(sched, [cancel], NOW)
    return Driver(store, sched)


def test_a_journaled_job_shows_as_the_core_shows_it(driver: Driver) -> None:
    ended = [j for j in driver.sched.job_ids() if driver.sched.job(j).state.terminal]
    assert {JobState.CANCELLED, JobState.COMPLETED, JobState.FAILED} <= {
        driver.sched.job(j).state for j in ended
    }
    for job_id in ended:
        rec = driver.store.job_record(job_id)
        assert rec is not None
        journal = jobs_api.job_doc(record_view(CONFIG, rec, driver.state_of, NOW))
        assert journal == jobs_api.job_doc(driver.sched.job(job_id)), job_id
    assert driver.store.job_record(999) is None


def _walk(listing: JobListing, **query: str) -> tuple[list[str], list[int]]:
    ids: list[str] = []
    totals: list[int] = []
    cursor = None
    for _ in range(100):
        q = dict(query, **({"cursor": cursor} if cursor else {}))
        doc: dict[str, Any] = listing.page(list_params(q), NOW)
        ids += [j["job_id"] for j in doc["jobs"]]
        totals.append(doc["total"])
        cursor = doc["next_cursor"]
        if cursor is None:
            return ids, totals
    raise AssertionError("the walk did not end")


def test_pages_hold_every_match_once_with_the_total(driver: Driver) -> None:
    listing = JobListing(driver)  # type: ignore[arg-type]
    active = [str(j) for j in driver.sched.job_ids() if not driver.sched.job(j).state.terminal]
    ids, totals = _walk(listing, limit="4")
    assert ids == active and set(totals) == {len(active)}
    ids, totals = _walk(listing, limit="7", history="1", order="desc")
    assert ids == [str(j) for j in range(30, 0, -1)] and set(totals) == {30}
    ids, _ = _walk(listing, history="1", user="bob", queue="gpu", limit="3")
    assert ids == [str(j) for j in range(11, 31) if (j - 1) % 2]
    ids, _ = _walk(listing, state="cancelled", limit="1")
    cancelled = [
        str(j) for j in driver.sched.job_ids() if driver.sched.job(j).state.value == "CANCELLED"
    ]
    assert cancelled and ids == cancelled
    ids, _ = _walk(listing, history="1", sort="priority", limit="5")
    prio = {
        str(j): driver.sched.job(j).priority.total
        for j in driver.sched.job_ids()
        if not driver.sched.job(j).state.terminal
    }
    live = [i for i in ids if i in prio]
    assert [prio[i] for i in live] == sorted(prio.values(), reverse=True)


def test_a_page_shows_live_jobs_from_the_core(driver: Driver) -> None:
    listing = JobListing(driver)  # type: ignore[arg-type]
    doc = listing.page(list_params({"limit": "1000"}), NOW)
    for j in doc["jobs"]:
        assert j == jobs_api.job_doc(driver.sched.job(int(j["job_id"])))


def test_cursors_are_opaque_and_tied_to_their_sort() -> None:
    key = PageKey(value=1234.5, job_id=77)
    text = encode_cursor("submit", True, key)
    assert decode_cursor(text, "submit", True) == key
    with pytest.raises(InvalidRequest, match="sort=submit order=desc"):
        decode_cursor(text, "id", True)
    with pytest.raises(InvalidRequest, match="not a cursor"):
        decode_cursor("garbage!", "id", False)
    with pytest.raises(InvalidRequest, match="not a cursor"):
        decode_cursor(encode_cursor("id", False, key)[:-3], "id", False)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": "0"}, "limit=0: want 1 to 1000"),
        ({"limit": "5000"}, "limit=5000"),
        ({"limit": "ten"}, "limit='ten'"),
        ({"sort": "name"}, "sort='name': want one of id, submit, state, priority"),
        ({"order": "up"}, "order='up'"),
        ({"array": "maybe"}, "array='maybe'"),
        ({"parent": "x"}, "parent='x': want a whole number"),
        ({"parent": "0"}, "parent=0: want a job id"),
        ({"state": "DONE"}, "--state DONE: unknown state"),
        ({"cursor": "x" * 600}, "cursor"),
    ],
)
def test_bad_queries_name_the_parameter(query: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace("[", r"\[")):
        list_params(query)


class Compacted:
    """A core that no longer holds ended jobs (as a compacting one will not)."""

    def __init__(self, sched: Scheduler) -> None:
        self._sched = sched

    def job(self, job_id: int) -> Any:
        from rbs.scheduler.state import SchedulerError

        view = self._sched.job(job_id)
        if view.state.terminal:
            raise SchedulerError(f"unknown job id {job_id}")
        return view


def test_a_page_shows_jobs_the_core_dropped_from_the_journal(driver: Driver) -> None:
    full = JobListing(driver).page(list_params({"history": "1", "limit": "1000"}), NOW)  # type: ignore[arg-type]
    core = driver.sched
    driver.sched = Compacted(core)  # type: ignore[assignment]
    try:
        again = JobListing(driver).page(list_params({"history": "1", "limit": "1000"}), NOW)  # type: ignore[arg-type]
    finally:
        driver.sched = core
    assert again == full and len(full["jobs"]) == 30
