"""`rbs job update`: a pending job's begin time, priority, time limit or queue changed in place.

As `scontrol update` does, only a job none of whose tasks has started may change, and
only in these four fields (the manifest the event brings must equal the job's in every
other). A user may lower a priority and shorten a time limit, or lengthen it up to the
queue's default; raising the priority, or the limit beyond that, takes the admin role.
The job leaves the ready queue and the begin-time heap first and is placed again, so
the indexes (the ready queue's order by priority, its shape counts) never see a job
change under them; its age (eligible time) is kept unless its begin time moves later.
"""

from __future__ import annotations

import dataclasses
import heapq

from rbs.model import JobState
from rbs.scheduler import lifecycle as lc
from rbs.scheduler.events import Update
from rbs.scheduler.instructions import Accepted, JobChange, Rejected
from rbs.scheduler.policy import compute_shape
from rbs.scheduler.state import Job, SchedState, SchedulerError
from rbs.units import format_duration

# The fields `rbs job update` may change, and the flag each is named by in messages.
FIELDS = {
    "begin_time": "--begin",
    "priority": "--priority",
    "time_limit": "--time",
    "queue": "--queue",
}
MAX_CHANGES = 50  # as rbs.scheduler.core keeps them


def update_job(st: SchedState, ev: Update) -> Accepted | Rejected:
    """Apply `ev`; Accepted with the job's id, or Rejected saying what may not change."""
    if not isinstance(ev, Update):  # pragma: no cover - the Event union is closed
        raise TypeError(f"not a scheduler event: {ev!r}")
    try:
        job, what = _apply(st, ev)
    except SchedulerError as e:
        return Rejected(event_id=ev.event_id, message=str(e))
    job.changes = (*job.changes, JobChange(action=f"update {what}", by=ev.by, at=st.now))
    job.changes = job.changes[-MAX_CHANGES:]
    st.touch(job)
    st.need_pass = True
    return Accepted(event_id=ev.event_id, job_id=job.id)


def _apply(st: SchedState, ev: Update) -> tuple[Job, str]:
    job = st.jobs.get(ev.job_id)
    ended = st.ended.get(ev.job_id)
    if ended is not None:
        raise SchedulerError(f"job {ev.job_id} is {ended.value}: only a pending job can be updated")
    if job is None:
        raise SchedulerError(f"unknown job id {ev.job_id}")
    if job.state is not JobState.PENDING or job.runs or job.start_time is not None:
        raise SchedulerError(
            f"job {job.id} is {job.state.value}: only a pending job none of whose tasks "
            "has started can be updated"
        )
    old, new = job.manifest, ev.manifest
    others = {f.name for f in dataclasses.fields(old)} - set(FIELDS)
    changed = sorted(f for f in others if getattr(old, f) != getattr(new, f))
    if changed:
        raise SchedulerError(
            f"rbs job update changes only --begin, --priority, --time and "
            f"--queue, not {', '.join(changed)}"
        )
    queue = st.config.queue(new.queue)
    if queue is None:
        names = ", ".join(st.config.queue_names)
        raise SchedulerError(f"--queue {new.queue!r}: unknown queue; queues: {names}")
    limit = new.time_limit or queue.default_time_limit or queue.max_time_limit
    if queue.max_time_limit is not None and limit is not None and limit > queue.max_time_limit:
        raise SchedulerError(
            f"--time {format_duration(limit)}: above queue {queue.name}'s limit of "
            f"{format_duration(queue.max_time_limit)}"
        )
    if not ev.admin:
        _check_user_may(job, new.priority, limit, queue.default_time_limit)
    what = [FIELDS[f] for f in FIELDS if getattr(old, f) != getattr(new, f)]
    st.ready.discard(job.id)  # before the shape or the priority change under it
    job.manifest = new
    job.provenance = tuple(sorted((dict(job.provenance) | dict(ev.provenance)).items()))
    job.time_limit = limit
    job.shape = compute_shape(new.resources, new.node_range[0], limit, new.container is not None)
    if new.begin_time != old.begin_time:
        _move_begin(st, job)
    elif job.reason != "Dependency":
        lc.sync_ready(st, job)
    return job, " ".join(what) or "(nothing changed)"


def _check_user_may(job: Job, priority: int, limit: int | None, default: int | None) -> None:
    if priority > job.manifest.priority:
        raise SchedulerError(
            f"--priority {priority}: raising job {job.id}'s priority (now "
            f"{job.manifest.priority}) takes the admin role; you may lower it"
        )
    allowed = [x for x in (job.time_limit, default) if x is not None]
    if allowed and (limit is None or limit > max(allowed)):
        raise SchedulerError(
            f"--time {format_duration(limit) if limit else 'none'}: beyond "
            f"{format_duration(max(allowed))} (the job's limit or its queue's default) "
            "takes the admin role; you may shorten it"
        )


def _move_begin(st: SchedState, job: Job) -> None:
    """Place the job again for its new begin time: waiting until then, or ready now."""
    # A stale heap entry would make the job eligible at its old time: drop it (rare: O(n)).
    st.begin_heap = [(t, j) for t, j in st.begin_heap if j != job.id]
    heapq.heapify(st.begin_heap)
    if job.reason == "Dependency":
        return  # placed once its dependencies hold, as at submit
    begin = job.manifest.begin_time
    if begin is not None and begin > st.now:
        job.eligible_time = None
        heapq.heappush(st.begin_heap, (begin, job.id))
        st.set_state(job, job.state, "BeginTime")
        return
    if job.eligible_time is None:
        job.eligible_time = st.now
    lc.sync_ready(st, job)
