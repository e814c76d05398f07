"""Why a run or a job ended, in words a person can act on, and the restart budget after worker loss.

Every ending carries a reason next to its state, shown as `STATE:reason`
(`FAILED:exit 3`, `NODE_FAIL:worker_lost`): the exit code or signal, the time limit,
OOM at its peak memory, the lost worker, or for a cancel who asked. An array's reason
counts its tasks in that state. The three budgets a task has are kept apart:
`max_retries` (failures), `restarts` (requeues after worker loss), and preemption,
which counts against neither.
"""

from __future__ import annotations

import signal as signals

from rbs.model import UNKNOWN_USER, JobState
from rbs.scheduler.instructions import JobChange, Note
from rbs.scheduler.state import Job, Run, SchedState

WORKER_LOST = "worker_lost"


def _signame(sig: int) -> str:
    try:
        return signals.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def run_reason(job: Job, run: Run, state: JobState, lost_worker: str | None = None) -> str | None:
    """The reason of one attempt that ended in `state` (None for COMPLETED)."""
    from rbs.units import format_duration, human_size

    if state is JobState.COMPLETED:
        return None
    if state is JobState.FAILED:
        if run.signal:
            return f"signal {run.signal} ({_signame(run.signal)})"
        return f"exit {run.exit_code}" if run.exit_code is not None else "failed"
    if state is JobState.OUT_OF_MEMORY:
        limit = human_size(job.manifest.resources.memory_bytes)
        peak = f" at peak {human_size(run.peak)}" if run.peak else ""
        return f"oom{peak} (limit {limit})"
    if state is JobState.TIMEOUT:
        limit = format_duration(job.time_limit) if job.time_limit else "?"
        return f"time limit {limit}"
    if state is JobState.CANCELLED:
        return cancelled_by(job.changes[-1].by if job.changes else None)
    if state is JobState.NODE_FAIL:
        return WORKER_LOST if lost_worker is None else f"{WORKER_LOST} {lost_worker}"
    if state is JobState.PREEMPTED:
        return "preempted"
    return None


def cancelled_by(user: str | None) -> str:
    """`cancelled by alice`; just `cancelled` when nobody is known (a server without users)."""
    return f"cancelled by {user}" if user and user != UNKNOWN_USER else "cancelled"


def job_reason(job: Job) -> str | None:
    """The reason of a job that just ended: its run's, or for an array, the tally."""
    state = job.state
    if state is JobState.COMPLETED:
        return None
    if job.is_array:
        n = job.pool.counts.get(state, 0)
        total = job.pool.total
        tally = f"{n} of {total} tasks {state.value}"
        if state is JobState.FAILED and job.exit_code is not None:
            tally += f", highest exit {job.exit_code}"
        return tally
    return job.reason


def lost_worker_of(st: SchedState, run: Run) -> str:
    """Which worker a lost run was lost with: the first dead one it ran on."""
    for node in run.nodes:
        worker = st.workers.get(node.worker_id)
        if worker is None or not worker.alive:
            return node.worker_id
    return run.nodes[0].worker_id if run.nodes else "?"


def may_restart(job: Job, run: Run) -> bool:
    """Whether a run lost with its worker may be requeued: `restarts` not used up."""
    return job.manifest.requeue and run.restarts_used < job.manifest.restarts


def attempts_cap(job: Job, run: Run, restarts_used: int, retries_used: int) -> int:
    """The most attempts the task can reach from `run`'s next one, preemptions aside."""
    m = job.manifest
    return run.attempt + 1 + (m.restarts - restarts_used) + (m.max_retries - retries_used)


def note_restart(st: SchedState, job: Job, run: Run, worker: str) -> None:
    nxt = run.attempt + 1
    cap = attempts_cap(job, run, run.restarts_used + 1, run.retries_used)
    text = f"worker {worker} lost; restarting on another worker (attempt {nxt} of {cap})"
    st.actions.append(Note(job_id=job.id, index=run.index, attempt=run.attempt, text=text))


def note_node_fail(st: SchedState, job: Job, run: Run, worker: str) -> None:
    m = job.manifest
    why = (
        "the job has --no-requeue (--restarts 0)"
        if not m.requeue
        else f"its {m.restarts} restarts are used up (--restarts {m.restarts})"
    )
    text = f"worker {worker} lost; not restarting: {why}; ending NODE_FAIL"
    st.actions.append(Note(job_id=job.id, index=run.index, attempt=run.attempt, text=text))


def note_never(st: SchedState, job: Job, dep: str, target: int, state: JobState) -> None:
    """A dependency that can never hold cancels the job: say which, in its changes and log."""
    text = f"dependency {dep} can never be satisfied: job {target} ended {state.value}"
    change = JobChange(action=f"cancelled: {text}", by="scheduler", at=st.now)
    job.changes = (*job.changes, change)[-50:]
    st.touch(job)
    st.actions.append(Note(job_id=job.id, index=None, attempt=0, text=text + "; cancelled"))
