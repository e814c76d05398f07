"""Ended jobs compacted out of the core: once nothing needs an ended job, it is forgotten.

With `Scheduler(forget_ended=True)` (the server's), a job that ended, holds no run and
has no attempt still being stopped leaves `SchedState.jobs` at the end of the step that
ended it; its journal row serves `show` and `list` (rbs/server/job_records.py). What the
core still needs of it is its final state, for dependencies submitted later and for
views of its dependents: `EndedStates` (rbs/scheduler/ended.py) keeps that in one byte
per job id, so a million ended jobs cost about a megabyte. A restart loads ended jobs
into that map only (`Store.restore(forget_ended=True)`). See
docs/design/listing-and-logs.md.
"""

from __future__ import annotations

from rbs.model import JobState
from rbs.scheduler.state import SchedState


def state_of(st: SchedState, job_id: int) -> JobState:
    """A job's state, held or forgotten; KeyError for an id never seen."""
    job = st.jobs.get(job_id)
    if job is not None:
        return job.state
    state = st.ended.get(job_id)
    if state is None:
        raise KeyError(job_id)
    return state


def known(st: SchedState, job_id: int) -> bool:
    return job_id in st.jobs or job_id in st.ended


def forget_ended(st: SchedState) -> int:
    """Forget every ended job that nothing needs any more; returns how many went.

    Candidates are the jobs this step touched (every ending touches its job) and those
    that waited: one with a run, or an attempt still being stopped (`st.draining`),
    waits for a later step. Pending dependents need only the final state, which
    `st.ended` keeps; the time heaps skip a job they no longer find. Call it before
    `flush`: the journal rows of the step come from `dirty_jobs`, which keeps its jobs."""
    ended = st.ended
    candidates = [j.id for j in st.dirty_jobs.values() if j.state.terminal]
    if not candidates and not ended.waiting:
        return 0
    busy = {key[0] for key in st.draining}
    waiting: set[int] = set()
    forgotten = 0
    for job_id in (*candidates, *ended.waiting):
        job = st.jobs.get(job_id)
        if job is None or not job.state.terminal:
            continue
        if job.runs or job_id in busy or job_id in st.ready:
            waiting.add(job_id)
            continue
        st.dependents.pop(job_id, None)
        ended.add(job_id, job.state)
        del st.jobs[job_id]
        forgotten += 1
    ended.waiting = waiting
    return forgotten
