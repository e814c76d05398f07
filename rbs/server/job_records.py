"""A journaled job as a `JobView`: how a job the scheduler no longer holds is shown and listed.

An ended job needs nothing the core keeps: its journal row (`jobs` in `jobs.db`) has the
manifest, the times, the exit and the array's counts. `record_view` builds from that row
the same `JobView` the core's `job_view` builds, so `show` and `list` answer one
document whichever of the two served it (a test compares them job by job).
"""

from __future__ import annotations

from collections.abc import Callable

from rbs.model import JobState
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.instructions import JobRecord
from rbs.scheduler.policy import PriorityBreakdown, age_bonus
from rbs.scheduler.views import ArrayView, JobView


def record_view(
    config: SchedulerConfig,
    rec: JobRecord,
    state_of: Callable[[int], JobState],
    now: float,
) -> JobView:
    """The view of a journaled job; `state_of` gives each dependency's current state."""
    m = rec.manifest
    array = None
    if m.array is not None:
        finished = tuple(sorted(rec.pool.counts))
        done = sum(n for _, n in finished)
        array = ArrayView(
            spec=str(m.array),
            total=m.array.size,
            pending=0 if rec.state.terminal else max(0, m.array.size - done),
            running=0,
            finished=finished,
        )
    queue = config.queue(m.queue)
    return JobView(
        job_id=rec.job_id,
        name=m.name,
        queue=m.queue,
        state=rec.state,
        reason=rec.reason,
        priority=PriorityBreakdown(
            base=m.priority,
            queue_weight=queue.priority_weight if queue else 0,
            # An ended job's age stops at its end.
            age_bonus=age_bonus(config, rec.eligible_time, rec.end_time or now),
        ),
        manifest=m,
        provenance=rec.provenance,
        time_limit=rec.time_limit,
        dependencies=tuple((str(d), state_of(d.job_id)) for d in m.dependencies),
        array=array,
        attempts=rec.attempts,
        workers=rec.workers,
        runs=(),
        exit_code=rec.exit_code,
        signal=rec.signal,
        oom=rec.oom,
        peak_memory_bytes=rec.peak_memory_bytes,
        submit_time=rec.submit_time,
        eligible_time=rec.eligible_time,
        start_time=rec.start_time,
        end_time=rec.end_time,
        user=rec.user,
        parent=rec.parent,
        changes=rec.changes,
    )
