"""Rebuilding the core's state from journal rows (`Scheduler.restore`).

Workers come back as they were; each gets a full heartbeat timeout from `now` to
reconnect and report, so runs placed there stay RUNNING until it does, or are requeued
when it does not. Nothing is started twice. An ended job comes back as its final state
only (`ended`, rbs/scheduler/compaction.py) unless one of its attempts is still being
stopped, which needs the job until it is over.
"""

from __future__ import annotations

from collections.abc import Iterable

from rbs.model import JobState
from rbs.scheduler import lifecycle as lc
from rbs.scheduler.instructions import JobRecord, TaskRecord, WorkerRecord
from rbs.scheduler.state import Job, Run, SchedState
from rbs.scheduler.workers import WorkerCapacity


def fill(
    st: SchedState,
    *,
    jobs: Iterable[JobRecord],
    tasks: Iterable[TaskRecord],
    workers: Iterable[WorkerRecord],
    ended: Iterable[tuple[int, JobState, int | None]],
    now: float,
) -> None:
    """Load the rows into a fresh state; `ended` is (job id, final state, parent) each."""
    st.now = now
    st.ready.advance(now)
    for wrec in workers:
        st.add_worker(WorkerCapacity(wrec, now))
    for job_id, state, parent in ended:
        st.ended.add(job_id, state)
        st.next_id = max(st.next_id, job_id + 1)
        if parent is not None:
            st.children[parent] = st.children.get(parent, 0) + 1
    for jrec in sorted(jobs, key=lambda r: r.job_id):
        st.jobs[jrec.job_id] = Job.from_record(jrec)
        st.next_id = max(st.next_id, jrec.job_id + 1)
        st.unfinished += not jrec.state.terminal
        if jrec.parent is not None:
            st.children[jrec.parent] = st.children.get(jrec.parent, 0) + 1
    for trec in tasks:
        run = Run.from_record(trec)
        job = st.jobs[trec.job_id]
        if trec.state.terminal or trec.state is JobState.PENDING:
            st.draining[run.key] = run
        else:
            job.runs[job.raw_of(run.index)] = run
            st.push_deadline(job, run)
        for node in run.live_nodes:
            st.workers[node.worker_id].adopt(run.node_key(node.rank), node)
        st.sync_release(run)
    for job in st.jobs.values():
        if not job.state.terminal:
            reason = job.reason
            lc.admit(st, job)
            job.reason = reason
    st.dirty_jobs.clear()
    st.dirty_workers.clear()
    st.need_pass = True
