"""Maintenance windows and drains in the core: holds, backfill into the gap, the Maintenance reason."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_harness import Harness, starts

from rbs.model import JobState
from rbs.scheduler.events import SetWindows, Window


def window(start: float, end: float, *workers: str, name: str = "m") -> SetWindows:
    return SetWindows(
        windows=(Window(name=name, start=start, end=end, workers=frozenset(workers)),)
    )


def test_only_jobs_that_end_before_the_window_start_on_its_workers() -> None:
    h = Harness()
    h.up("w", cpus=4, slots=4)
    h.send(window(1000.0, 2000.0, "w"), at=0.0)
    short = h.submit(res=(1, 1, 0), time_limit=900)
    assert h.state(short) is JobState.RUNNING  # ends by 900: it fills the gap
    long = h.submit(res=(1, 1, 0), time_limit=1500)
    unlimited = h.submit(res=(1, 1, 0))
    assert h.state(long) is JobState.PENDING and h.reason(long) == "Maintenance"
    assert h.state(unlimited) is JobState.PENDING  # no limit: it could run into the window
    # In the window nothing new starts; at its end the rest do.
    h.exit(short)
    h.tick(at=1200.0)
    quick = h.submit(res=(1, 1, 0), time_limit=10)
    assert h.state(quick) is JobState.PENDING
    h.send(SetWindows(windows=()), at=2000.0)  # the server drops an ended window
    assert {h.state(j) for j in (long, unlimited, quick)} == {JobState.RUNNING}


def test_a_window_on_one_worker_leaves_the_others_alone() -> None:
    h = Harness()
    h.up("a", cpus=1, slots=1)
    h.up("b", cpus=1, slots=1)
    h.send(window(0.0, math.inf, "a", name="drain:a"), at=1.0)  # a drain
    first = h.submit(res=(1, 1, 0))
    (start,) = starts(h.last)
    assert start.worker_id == "b" and h.state(first) is JobState.RUNNING
    second = h.submit(res=(1, 1, 0))
    assert h.reason(second) == "Maintenance"  # b is busy; a is free but drains
    h.send(SetWindows(windows=()))
    assert h.state(second) is JobState.RUNNING


def test_a_running_job_keeps_running_into_the_window() -> None:
    h = Harness()
    h.up("w", cpus=1, slots=1)
    jid = h.submit(res=(1, 1, 0))
    h.send(window(10.0, 20.0), at=5.0)
    h.tick(at=15.0)
    assert h.state(jid) is JobState.RUNNING


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(min_value=1, max_value=500),
    jobs=st.lists(
        st.tuples(st.integers(1, 2), st.one_of(st.none(), st.integers(1, 1000))),
        min_size=1,
        max_size=12,
    ),
)
def test_no_job_that_would_overrun_a_window_starts_on_its_worker(
    start: int, jobs: list[tuple[int, int | None]]
) -> None:
    h = Harness()
    h.up("held", cpus=2, slots=4)
    h.up("free", cpus=2, slots=4)
    h.send(window(float(start), float(start + 100), "held"), at=0.0)
    for cpus, limit in jobs:
        h.submit(res=(cpus, 1, 0), time_limit=limit)
        for s in starts(h.last):
            if s.worker_id == "held":
                view = h.sched.job(s.run.job_id)
                assert view.time_limit is not None and view.time_limit <= start
