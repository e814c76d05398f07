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
from rbs.scheduler.policy import Shape, dominates, shape_of
from rbs.scheduler.state import Job, SchedState
from rbs.scheduler.workers import WorkerCapacity

INF = math.inf


def schedule(st: SchedState) -> None:
    """One pass over the ready queue; starts what fits and records pending reasons."""
    st.need_pass = False
    st.pass_no += 1
    Pass(st).run()


class Pass:
    """The per-pass bookkeeping: reservations, shapes known not to fit, cached estimates.

    Capacity only shrinks during a pass (starts, reservations), so a task shape that
    failed once fails for the rest of the pass, and so does every shape at least as big.
    `open_shapes` holds the queue's shapes not yet ruled out; the pass ends when it is
    empty or no worker has room left.
    """

    def __init__(self, st: SchedState) -> None:
        self.st = st
        self.reserved: dict[str, float] = {}
        self.reservations = 0
        self.open_shapes = self._feasible(st)
        self.blocked: dict[Shape, str] = {}
        self.failed: list[tuple[Shape, str]] = []
        self.unreservable: set[tuple[Resources, int]] = set()
        self.releases: dict[tuple[str, int], list[tuple[float, int, int, int]]] = {}

    @staticmethod
    def _feasible(st: SchedState) -> set[Shape]:
        """The queue's shapes that fit the largest free amounts: a cheap superset of what can start."""
        cpu = mem = gpus = slots = 0
        for w in st.workers.values():
            if w.alive and w.reachable and w.free_slots > 0:
                cpu = max(cpu, w.free_cpu)
                mem = max(mem, w.free_mem)
                gpus = max(gpus, len(w.free_gpus))
                slots += 1
        return {
            s
            for s in st.ready.shapes
            if s[0] <= cpu and s[1] <= mem and s[2] <= gpus and s[3] <= slots
        }

    def run(self) -> None:
        st = self.st
        blocked = self.blocked
        for job in st.ready:
            job.eval_pass = st.pass_no
            why = blocked.get(job.shape) if not job.runs else None
            if why is not None:
                # Fast path for deep queues: its shape is already known not to fit.
                known = "Priority" if self.reserved and why != "ReqNodeNotAvail" else why
                if job.reason != known:
                    st.set_state(job, job.state, known)
                continue
            allocated = len(self.reserved), st.pass_starts
            reason = self.fill(job)
            if reason is None:
                continue
            depth_left = self.reservations < st.config.reservation_depth
            if reason == "Resources" and depth_left and self.reserve(job):
                self.reservations += 1
            if job.reason != reason:
                st.set_state(job, job.state, reason)
            if not self.open_shapes:
                break
            if allocated != (len(self.reserved), st.pass_starts) and not _capacity_left(
                st, self.reserved
            ):
                break

    def fill(self, job: Job) -> str | None:
        """Start as many of the job's tasks as fit; the pending reason for the rest, if any."""
        st = self.st
        throttle = job.manifest.array.throttle if job.manifest.array is not None else None
        shape = shape_of(job)
        while job.pool.pending:
            if throttle is not None and len(job.runs) >= throttle:
                return "JobArrayTaskLimit"
            if shape not in self.open_shapes:
                why = self.blocked.get(shape)
                if why is None:
                    # Ruled out up front (nothing has that much free). Behind a failed
                    # smaller shape it waits on that one; otherwise it failed itself.
                    behind = next((w for f, w in self.failed if dominates(shape, f)), None)
                    if behind is None:
                        return self.fail(job, shape, placeable=False)
                    why = self.blocked[shape] = behind
                return "Priority" if self.reserved and why != "ReqNodeNotAvail" else why
            placement = place(st, job, self.reserved)
            if placement is None:
                return self.fail(job, shape)
            start_run(st, job, placement)
        return None

    def fail(self, job: Job, shape: Shape, placeable: bool = True) -> str:
        """Record that `shape` cannot start now, nor anything at least as big."""
        why = self.diagnose(job, placeable)
        for other in [s for s in self.open_shapes if dominates(s, shape)]:
            self.open_shapes.discard(other)
            self.blocked[other] = why
        self.blocked[shape] = why
        self.failed.append((shape, why))
        return why

    def diagnose(self, job: Job, placeable: bool = True) -> str:
        st = self.st
        res = job.manifest.resources
        lo = job.manifest.node_range[0]
        if st.capable_count(res) < lo:
            return "ReqNodeNotAvail"  # the workers that could run it are down or absent
        if placeable and self.reserved and place(st, job, {}) is not None:
            return "Priority"  # it would fit, but on resources promised to a job ahead of it
        return "Resources"

    def reserve(self, job: Job) -> bool:
        """Promise the workers where the job fits soonest to it, as of that time."""
        st = self.st
        res = job.manifest.resources
        lo = job.manifest.node_range[0]
        if (res, lo) in self.unreservable:
            return False
        times = sorted(
            (self.available_at(w, res), w.worker_id)
            for w in st.workers.values()
            if w.alive
            and w.reachable
            and w.worker_id not in self.reserved
            and w.could_ever_fit(res)
        )
        if len(times) < lo:
            self.unreservable.add((res, lo))  # only more reservations can follow
            return False
        chosen = times[:lo]
        at = chosen[-1][0]  # a gang starts when its last node is free
        for _, worker_id in chosen:
            self.reserved[worker_id] = at
        return True

    def available_at(self, w: WorkerCapacity, res: Resources) -> float:
        """When `res` will be free on `w` if everything there runs to its time limit."""
        cpu, mem, gpus, slots = w.free_cpu, w.free_mem, len(w.free_gpus), w.free_slots
        need_cpu, need_mem, need_gpus = res.cpu_millis, res.memory_bytes, res.gpus
        if cpu >= need_cpu and mem >= need_mem and gpus >= need_gpus and slots >= 1:
            return self.st.now
        # Allocations are only added during a pass, so their count versions the cache.
        version = (w.worker_id, len(w.allocs))
        releases = self.releases.get(version)
        if releases is None:
            releases = sorted(
                (self.st.node_deadline(k), n.cpu_millis, n.memory_bytes, len(n.gpus))
                for k, n in w.allocs.items()
            )
            self.releases[version] = releases
        for end, c, m, g in releases:
            cpu, mem, gpus, slots = cpu + c, mem + m, gpus + g, slots + 1
            if cpu >= need_cpu and mem >= need_mem and gpus >= need_gpus and slots >= 1:
                return end
        return INF


def place(st: SchedState, job: Job, reserved: dict[str, float]) -> list[WorkerCapacity] | None:
    """Best-fit workers for one task (rank order), honouring reservations; None if none fit."""
    res = job.manifest.resources
    lo, hi = job.manifest.node_range
    limit_end = st.now + job.time_limit if job.time_limit is not None else INF
    cpu, mem, gpus = res.cpu_millis, res.memory_bytes, res.gpus
    fits: list[WorkerCapacity] = []
    # The hot loop of every pass: the checks of WorkerCapacity.fits, inlined.
    for w in st.workers.values():
        if (
            w.free_slots < 1
            or w.free_cpu < cpu
            or w.free_mem < mem
            or len(w.free_gpus) < gpus
            or not (w.alive and w.reachable)
        ):
            continue
        if reserved:
            until = reserved.get(w.worker_id)
            if until is not None and limit_end > until:
                continue
        fits.append(w)
    if len(fits) < lo:
        return None
    if hi == 1:
        return [fits[0] if len(fits) == 1 else min(fits, key=lambda w: w.leftover(res))]
    fits.sort(key=lambda w: w.leftover(res))
    # Rank 0 hosts the rendezvous, so it needs a free master port on its worker.
    head = next((w for w in fits if w.fits(res, port=True)), None)
    if head is None:
        return None
    rest = [w for w in fits if w is not head][: hi - 1]
    return [head, *rest]


def _capacity_left(st: SchedState, reserved: dict[str, float]) -> bool:
    """Whether any later job could still start: a free slot unreserved or open to backfill."""
    for w in st.workers.values():
        if w.alive and w.reachable and w.free_slots > 0:
            until = reserved.get(w.worker_id)
            if until is None or st.now < until < INF:
                return True
    return False
