"""The workers a preemption frees are held for the job that preempted (its preemptor).

When `preempt` stops victims, the workers it chose are held for the preemptor
(`SchedState.held_for`: worker -> (job id, until)) from then until it starts there, leaves
the queue (it started all its tasks, was cancelled or ended), or `HOLD_S` seconds pass.
Meanwhile no other job starts on them, not a lower-priority one, not a backfill, so the
room the victims give back cannot be taken before the preemptor is placed; each pass
places the holders first (`start_holders`), before its priority walk. A hold is made only
when victims are stopped: a job that finds its room "on the way" (runs already stopping)
keeps the hold it has, so the bound is real and a preemptor whose victims never free
enough lets its workers go. The holds live in memory, not in the journal: after a
restart the victims' room goes to whoever the pass places first.

Cost: O(holds) per pass, and holds exist only while a preemption is under way.
"""

from __future__ import annotations

from collections.abc import Iterable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rbs.scheduler.state import Job, SchedState

# How long a preemptor keeps the workers its victims free, at most (seconds). The
# victims' grace (SIGTERM, then SIGKILL after the worker's grace, 10 s by default) and
# their reports fit well inside it.
HOLD_S = 120.0


def hold(st: SchedState, job: Job, worker_ids: Iterable[str]) -> None:
    """Hold `worker_ids` for `job` from now on (victims were just stopped there)."""
    until = st.now + HOLD_S
    for wid in worker_ids:
        st.held_for[wid] = (job.id, until)


def held_by(st: SchedState, job_id: int) -> list[str]:
    """The workers held for `job_id`."""
    return [wid for wid, (jid, _) in st.held_for.items() if jid == job_id]


def prune(st: SchedState) -> None:
    """Drop the holds whose bound passed or whose preemptor waits no more."""
    if not st.held_for:
        return
    gone = []
    for wid, (jid, until) in st.held_for.items():
        job = st.jobs.get(jid)
        if until <= st.now or job is None or job.state.terminal or not job.pool.pending:
            gone.append(wid)
    for wid in gone:
        del st.held_for[wid]


def lapse_due(st: SchedState) -> None:
    """On a tick: a hold whose bound passed asks for a pass (its workers open again)."""
    if any(until <= st.now for _, until in st.held_for.values()):
        prune(st)
        st.need_pass = True


def release(st: SchedState, job: Job, worker_ids: Iterable[str]) -> None:
    """`job` started on `worker_ids`: their holds for it are spent."""
    for wid in worker_ids:
        held = st.held_for.get(wid)
        if held is not None and held[0] == job.id:
            del st.held_for[wid]


def held_for_other(st: SchedState, worker_id: str, job_id: int) -> bool:
    """Whether `worker_id` is held for a job other than `job_id`."""
    held = st.held_for.get(worker_id)
    return held is not None and held[0] != job_id
