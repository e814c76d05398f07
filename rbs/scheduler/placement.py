"""The scheduling pass: priority order, best-fit placement, gangs, reservations and backfill.

Jobs are examined highest priority first. A job that cannot start gets a reservation
(up to `reservation_depth` per pass): the workers where it will fit soonest, judged by
the time limits of what runs there. Lower-priority jobs may use a reserved worker only
if their own time limit ends before that moment (backfill), so skipping ahead never
delays the blocked job. Without time limits there is no backfill onto reserved workers.

A pass stops early once no worker could take anything, so a pass costs O(starts +
examined jobs x workers), not O(all pending tasks). Jobs the pass did not reach read as
pending for `Priority` (someone ahead of them is waiting) in views.
"""

from __future__ import annotations

import math

from rbs.model import Resources
from rbs.scheduler.lifecycle import start_run
from rbs.scheduler.state import Job, SchedState
from rbs.scheduler.workers import WorkerState

INF = math.inf
_Shape = tuple[int, int, int, int, float]  # cpu, memory, gpus, min nodes, time limit


def _shape(job: Job) -> _Shape:
    r = job.manifest.resources
    limit = float(job.time_limit) if job.time_limit is not None else INF
    return (r.cpu_millis, r.memory_bytes, r.gpus, job.manifest.node_range[0], limit)


def _dominates(a: _Shape, b: _Shape) -> bool:
    return all(x >= y for x, y in zip(a, b, strict=True))


def schedule(st: SchedState) -> None:
    """One pass over the ready queue; starts what fits and records pending reasons."""
    st.need_pass = False
    st.pass_no += 1
    reserved: dict[str, float] = {}
    failed: list[tuple[_Shape, str]] = []
    reservations = 0
    for job in st.ready:
        job.eval_pass = st.pass_no
        reason = _fill(st, job, reserved, failed)
        if reason is None:
            continue
        depth_left = reservations < st.config.reservation_depth
        if reason == "Resources" and depth_left and _reserve(st, job, reserved):
            reservations += 1
        if job.reason != reason:
            st.set_state(job, job.state, reason)
        if not _capacity_left(st, reserved):
            break


def _fill(
    st: SchedState, job: Job, reserved: dict[str, float], failed: list[tuple[_Shape, str]]
) -> str | None:
    """Start as many of the job's tasks as fit; the pending reason for the rest, if any."""
    throttle = job.manifest.array.throttle if job.manifest.array is not None else None
    shape = _shape(job)
    while job.pool.pending:
        if throttle is not None and len(job.runs) >= throttle:
            return "JobArrayTaskLimit"
        for other, why in failed:
            if _dominates(shape, other):
                return "Priority" if reserved and why != "ReqNodeNotAvail" else why
        placement = place(st, job, reserved)
        if placement is None:
            why = _diagnose(st, job, reserved)
            failed.append((shape, why))
            return why
        start_run(st, job, placement)
    return None


def place(st: SchedState, job: Job, reserved: dict[str, float]) -> list[WorkerState] | None:
    """Best-fit workers for one task (rank order), honouring reservations; None if none fit."""
    res = job.manifest.resources
    lo, hi = job.manifest.node_range
    limit_end = st.now + job.time_limit if job.time_limit is not None else INF
    fits: list[WorkerState] = []
    for w in st.workers.values():
        if not w.alive or w.free_slots < 1 or not w.fits(res):
            continue
        until = reserved.get(w.worker_id)
        if until is not None and limit_end > until:
            continue
        fits.append(w)
    if len(fits) < lo:
        return None
    if hi == 1:
        return [min(fits, key=lambda w: w.leftover(res))]
    fits.sort(key=lambda w: w.leftover(res))
    # Rank 0 hosts the rendezvous, so it needs a free master port on its worker.
    head = next((w for w in fits if w.fits(res, port=True)), None)
    if head is None:
        return None
    rest = [w for w in fits if w is not head][: hi - 1]
    return [head, *rest]


def _diagnose(st: SchedState, job: Job, reserved: dict[str, float]) -> str:
    res = job.manifest.resources
    lo = job.manifest.node_range[0]
    capable = sum(1 for w in st.workers.values() if w.alive and w.could_ever_fit(res))
    if capable < lo:
        return "ReqNodeNotAvail"  # the workers that could run it are down or absent
    if reserved and place(st, job, {}) is not None:
        return "Priority"  # it would fit, but on resources promised to a job ahead of it
    return "Resources"


def _reserve(st: SchedState, job: Job, reserved: dict[str, float]) -> bool:
    res = job.manifest.resources
    lo = job.manifest.node_range[0]
    times = sorted(
        (_available_at(st, w, res), w.worker_id)
        for w in st.workers.values()
        if w.alive and w.worker_id not in reserved and w.could_ever_fit(res)
    )
    if len(times) < lo:
        return False
    chosen = times[:lo]
    at = chosen[-1][0]  # a gang starts when its last node is free
    for _, worker_id in chosen:
        reserved[worker_id] = at
    return True


def _available_at(st: SchedState, w: WorkerState, res: Resources) -> float:
    """When `res` will be free on `w` if everything there runs to its time limit."""
    cpu, mem, gpus, slots = w.free_cpu, w.free_mem, len(w.free_gpus), w.free_slots

    def ok() -> bool:
        return cpu >= res.cpu_millis and mem >= res.memory_bytes and gpus >= res.gpus and slots >= 1

    if ok():
        return st.now
    for end, node in sorted(
        ((st.node_deadline(k), n) for k, n in w.allocs.items()), key=lambda x: x[0]
    ):
        cpu += node.cpu_millis
        mem += node.memory_bytes
        gpus += len(node.gpus)
        slots += 1
        if ok():
            return end
    return INF


def _capacity_left(st: SchedState, reserved: dict[str, float]) -> bool:
    """Whether any later job could still start: a free slot unreserved or open to backfill."""
    for w in st.workers.values():
        if w.alive and w.free_slots > 0:
            until = reserved.get(w.worker_id)
            if until is None or st.now < until < INF:
                return True
    return False
