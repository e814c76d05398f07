"""The scheduling pass: priority order, best-fit placement, gangs, reservations and backfill.

Jobs are examined highest priority first. A job that cannot start gets a reservation
(up to `hold_depth` per pass): the workers where it will fit soonest, judged by
the time limits of what runs there. Lower-priority jobs may use a reserved worker only
if their own time limit ends before that moment (backfill), so skipping ahead never
delays the blocked job. Without time limits there is no time to promise: such a job
holds no workers (as in Slurm, backfill needs time limits).

What a decision costs (docs/design/scheduler-scale.md):
- placement asks the free index (`FreeIndex`): O(log W + workers walked), never a
  scan of every worker;
- a reservation walks the release calendar from the earliest release and stops at
  the first workers that fit: O(releases before the reserved start);
- the pass walks the ready queue by task shape: once a job of a shape fails, the
  shape is closed for the pass and its other jobs are never looked at, and the pass
  stops after `pass_depth` failed shapes (Slurm's `default_queue_depth`) or as soon as
  no free slot is left open. Jobs it did not reach read as pending for `Priority` (or
  for their shape's reason) in views.
"""

from __future__ import annotations

import math

from rbs.model import Resources
from rbs.scheduler.lifecycle import start_run
from rbs.scheduler.pass_failures import PassFailures
from rbs.scheduler.pinning import cores_free
from rbs.scheduler.policy import Shape
from rbs.scheduler.preempt import preempt, preempted_queues
from rbs.scheduler.preempt_holds import held_by, prune, release
from rbs.scheduler.releases import STOPPING
from rbs.scheduler.state import Job, SchedState
from rbs.scheduler.windows import MAINTENANCE, WindowHolds
from rbs.scheduler.workers import WorkerCapacity

INF = math.inf
# Release-calendar entries one reservation may walk before it asks the drain index.
WALK_BUDGET = 32
PREEMPT_TRIES = 8  # jobs hidden by a failed shape that may still try preemption, per pass


def schedule(st: SchedState) -> None:
    """One pass over the ready queue; starts what fits and records pending reasons."""
    st.need_pass = False
    st.pass_no += 1
    Pass(st).run()


class Pass:
    """The per-pass bookkeeping: reservations and the shapes found not to fit.

    Capacity only shrinks during a pass (starts, reservations), so a task shape that
    failed once fails for the rest of the pass.
    """

    def __init__(self, st: SchedState) -> None:
        self.st = st
        # Promises to blocked jobs and preemptors: worker -> the moment it is held from.
        self.reserved: dict[str, float] = {}
        # The maintenance windows' holds, asked per worker met (windows.py).
        self.windows = WindowHolds(st) if st.windows else None
        prune(st)
        for wid in st.held_for:  # held for a preemptor: closed to every other job
            self.reserved[wid] = st.now
        self.reservations = 0
        self.blocked: dict[Shape, str] = {}
        self.closed: set[Shape] = set()
        self.unreservable: set[tuple[Resources, int]] = set()
        # The shapes that failed, and the single-node requests (cpu, memory, GPUs) no
        # worker has free, reservations or not: any shape at least as big fails for the
        # rest of the pass (pass_failures.py).
        self.failures = PassFailures(st.work)
        self.nothing_fits = False
        self.dead: set[Shape] = set()  # shapes known to fail for the rest of the pass
        self.witness: Shape | None = None  # the last shape seen still possible
        # The queue's shapes in order, as `_all_fail` walks them: those before `_order_at`
        # are known to fail (or had left the queue); rebuilt when a new shape comes in.
        self._order: list[Shape] = []
        self._order_at = 0
        self._order_version = -1
        # With preemption configured a full cluster does not end the pass: a job that
        # may preempt, further down, must still be met (`pass_depth` bounds the walk).
        self.preempting = bool(st.config.queues) and bool(preempted_queues(st.config))
        self.tries = 0  # preemptions tried by jobs a failure hid (`may_preempt`)

    def run(self) -> None:
        st = self.st
        work = st.work
        failures = 0
        depth = st.config.pass_depth
        if st.held_for:
            self.start_holders()
        walk = st.ready.walk(self.closed)
        try:
            for job, first in walk:
                if first:
                    work.shapes_examined += 1
                work.jobs_examined += 1
                job.eval_pass = st.pass_no
                allocated = len(self.reserved), st.pass_starts
                # Most jobs a busy pass meets are at least as big as one that failed.
                reason = self._known_to_fail(job.shape) if self.failures else None
                if reason is not None:
                    self.blocked[job.shape] = reason
                    if reason == "Resources" and self.preempting and self.may_preempt(job):
                        preempt(st, job)  # what hides it from placement does not from this
                else:
                    reason = self.fill(job, checked=True)
                if reason is None or reason == "JobArrayTaskLimit":
                    if job.reason != reason and reason is not None:
                        st.set_state(job, job.state, reason)
                    continue  # its shape stays open: the next job of that shape may start
                self.closed.add(job.shape)
                # A container job holds no reservation: the calendar knows no runtimes.
                depth_left = self.reservations < st.config.hold_depth
                depth_left = depth_left and job.manifest.container is None
                depth_left = depth_left and not job.manifest.cpu_cores  # nor does pinning
                if reason == "Resources" and depth_left and self.reserve(job):
                    self.reservations += 1
                if job.reason != reason:
                    st.set_state(job, job.state, reason)
                failures += 1
                if failures >= depth:
                    break
                if self.preempting:
                    continue
                if self.nothing_fits or not len(st.free):
                    break
                if allocated != (len(self.reserved), st.pass_starts) and not self.room_left():
                    break
        finally:
            walk.close()
        st.last_blocked = self.blocked
        st.last_reserved = bool(self.reserved) or bool(self.windows)

    def fill(self, job: Job, checked: bool = False) -> str | None:
        """Start as many of the job's tasks as fit; the pending reason for the rest, if any.

        `checked`: the caller has just found the shape not known to fail.
        """
        st = self.st
        throttle = job.manifest.array.throttle if job.manifest.array is not None else None
        res = job.manifest.resources
        single = job.manifest.node_range[1] == 1
        req = (res.cpu_millis, res.memory_bytes, res.gpus)
        while job.pool.pending:
            if throttle is not None and len(job.runs) >= throttle:
                return "JobArrayTaskLimit"
            why = None if checked else self._known_to_fail(job.shape)
            checked = False
            if why is not None:
                if st.capable_count(res) < job.manifest.node_range[0]:
                    why = "ReqNodeNotAvail"
                self.blocked[job.shape] = why
                return why
            placement, room = place_or_room(st, job, self.reserved_for(job), self.windows)
            if placement is None:
                pinned = bool(job.manifest.cpu_cores)  # says nothing about unpinned jobs
                if single and not room and job.manifest.container is None and not pinned:
                    self.failures.add_no_room(req)
                why = self.fail(job, room)
                if why == "Resources" and not room:
                    preempt(st, job)  # victims' room comes back once they have exited
                if not pinned:
                    self.failures.add(job.shape, why)
                self.nothing_fits = self._all_fail()
                return why
            self.start(job, placement)
        return None

    def start(self, job: Job, placement: list[WorkerCapacity]) -> None:
        """Start one task of `job`; the preemption holds it had on those workers are spent."""
        start_run(self.st, job, placement)
        if not self.st.held_for:
            return
        ids = [w.worker_id for w in placement]
        release(self.st, job, ids)
        for wid in ids:
            if wid not in self.st.held_for:
                self.reserved.pop(wid, None)

    def may_preempt(self, job: Job) -> bool:
        """Whether a job an earlier failure hides tries to preempt (at most 8 per pass)."""
        q = self.st.config.queue(job.manifest.queue)
        self.tries += 1 if q is not None and q.preempts else 0
        return q is not None and bool(q.preempts) and self.tries <= PREEMPT_TRIES

    def reserved_for(self, job: Job) -> dict[str, float]:
        """The promises `job` must honour: all of them, less the workers held for it."""
        st = self.st
        if not st.held_for:
            return self.reserved
        own = held_by(st, job.id)
        if not own:
            return self.reserved
        mine = dict(self.reserved)
        for wid in own:
            del mine[wid]  # (a maintenance window still holds it: `place` asks them)
        return mine

    def promised(self, worker_id: str) -> bool:
        """Whether a blocked job, a preemptor or a maintenance window holds the worker."""
        if worker_id in self.reserved:
            return True
        return self.windows is not None and self.windows.at(worker_id) is not None

    def until(self, worker_id: str) -> float | None:
        """The earliest moment a promise or a window holds the worker from, if any."""
        return _held_until(self.reserved, self.windows, worker_id)

    def start_holders(self) -> None:
        """Place the preemptors first on the workers held for them, whatever their rank in
        the walk, so the room their victims gave back goes to them."""
        st = self.st
        for job_id in sorted({jid for jid, _ in st.held_for.values()}):
            job = st.jobs[job_id]
            m = job.manifest
            throttle = m.array.throttle if m.array is not None else None
            while job.pool.pending and job.id in st.ready:
                if throttle is not None and len(job.runs) >= throttle:
                    break
                placement = place(st, job, self.reserved_for(job), self.windows)
                if placement is None:
                    break
                self.start(job, placement)

    def _known_to_fail(self, shape: Shape) -> str | None:
        """The reason a shape cannot start, if that follows from failures earlier in the pass."""
        return self.failures.known_to_fail(shape)

    def _all_fail(self) -> bool:
        """Whether nothing left in the queue can start (checked while the queue holds few
        distinct shapes; beyond, `pass_depth` bounds the pass)."""
        shapes = self.st.ready.shape_counts
        if len(shapes) > 256:
            return False
        # A shape seen to be still possible usually stays so: check it first.
        if self.witness in shapes and self._known_to_fail(self.witness) is None:
            return False
        ready = self.st.ready
        if self._order_version != ready.shapes_added:
            self._order, self._order_at = list(shapes), 0
            self._order_version = ready.shapes_added
        order, i = self._order, self._order_at
        while i < len(order):
            shape = order[i]
            if shape in shapes:  # one that left and came back is a new key: a rebuild
                if shape not in self.dead and self._known_to_fail(shape) is None:
                    self._order_at = i
                    self.witness = shape
                    return False
                self.dead.add(shape)
            i += 1
        self._order_at = i
        return True

    def fail(self, job: Job, room: bool) -> str:
        """Record that the job's shape cannot start now, for the rest of the pass.

        `room`: it would fit, but only on resources promised to a job ahead of it.
        """
        st = self.st
        res = job.manifest.resources
        lo = job.manifest.node_range[0]
        if st.capable_count(res) < lo:
            why = "ReqNodeNotAvail"  # the workers that could run it are down or absent
        else:
            why = "Priority" if room else "Resources"
            if room and self.windows and place(st, job, self.reserved) is not None:
                why = MAINTENANCE  # it fits once the windows are set aside
        self.blocked[job.shape] = why
        return why

    def reserve(self, job: Job) -> bool:
        """Promise the workers where the job fits soonest to it, as of that time.

        Workers that fit now come first (a gang may have some), then the release
        calendar is walked in time order, adding each release to its worker's free
        amounts, until `lo` workers fit; releases at the same moment are taken
        together and their workers chosen by id. With fewer than `lo` workers freed by
        time limits, the job holds nothing: no promise can be made.
        """
        st = self.st
        res = job.manifest.resources
        lo = job.manifest.node_range[0]
        if (res, lo) in self.unreservable or (self.windows and self.windows.every < INF):
            return False  # (a window over every worker leaves no worker to promise)
        chosen: list[tuple[float, str]] = []
        taken: set[str] = set()
        for w in st.free.fitting(res):
            if not self.promised(w.worker_id):
                chosen.append((st.now, w.worker_id))
                taken.add(w.worker_id)
                if len(chosen) >= lo:
                    break
        if len(chosen) < lo:
            self._walk_releases(res, lo, chosen, taken)
        if len(chosen) < lo:
            # The walk stopped at its budget: take the workers that drain first.
            for drain, w in st.drains.earliest(res.gpus):
                st.work.workers_examined += 1
                wid = w.worker_id
                if wid in taken or self.promised(wid):
                    continue
                if w.alive and w.reachable and w.could_ever_fit(res):
                    chosen.append((max(drain, st.now), wid))
                    taken.add(wid)
                    if len(chosen) >= lo:
                        break
        if len(chosen) < lo:
            eligible = 0  # a window over every worker holds them all
            if self.windows is None or self.windows.every == INF:
                some = self.windows.some.keys() if self.windows is not None else ()
                held = [st.workers.get(wid) for wid in set(self.reserved) | set(some)]
                eligible = st.capable_count(res) - sum(
                    1 for w in held if w is not None and w.could_ever_fit(res)
                )
            if eligible < lo:
                self.unreservable.add((res, lo))  # only more reservations can follow
            return False
        at = max(t for t, _ in chosen[:lo])  # a gang starts when its last node is free
        for _, worker_id in chosen[:lo]:
            self.reserved[worker_id] = at
        return True

    def _walk_releases(
        self, res: Resources, lo: int, chosen: list[tuple[float, str]], taken: set[str]
    ) -> None:
        st = self.st
        work = st.work
        need_cpu, need_mem, need_gpus = res.cpu_millis, res.memory_bytes, res.gpus
        acc: dict[str, list[int]] = {}
        group: list[str] = []
        group_time = -INF
        now, workers, promised = st.now, st.workers, self.promised
        visited = 0
        for time, run in st.releases.walk():
            at = now if time == STOPPING or time < now else time
            if at != group_time:
                if group:
                    chosen.extend((group_time, wid) for wid in sorted(group))
                    group = []
                    if len(chosen) >= lo:
                        break
                group_time = at
            if visited >= WALK_BUDGET:
                # Far enough: keep what was found, the drain index answers for the rest.
                chosen.extend((group_time, wid) for wid in sorted(group))
                break
            for node in run.nodes:
                if node.exited:
                    continue
                visited += 1
                wid = node.worker_id
                if wid in taken or promised(wid):
                    continue
                w = workers[wid]
                if not (w.alive and w.reachable and w.could_ever_fit(res)):
                    continue
                free = acc.get(wid)
                if free is None:
                    free = acc[wid] = [w.free_cpu, w.free_mem, len(w.free_gpus), w.free_slots]
                free[0] += node.cpu_millis
                free[1] += node.memory_bytes
                free[2] += len(node.gpus)
                free[3] += 1
                if (
                    free[0] >= need_cpu
                    and free[1] >= need_mem
                    and free[2] >= need_gpus
                    and free[3] >= 1
                ):
                    taken.add(wid)
                    group.append(wid)
        else:
            chosen.extend((group_time, wid) for wid in sorted(group))
        work.allocations_visited += visited

    def room_left(self) -> bool:
        """Whether any later job could still start: a free slot unreserved or open to backfill."""
        st = self.st
        wins = self.windows
        if wins is not None and wins.every <= st.now:
            return False  # a window over every worker has begun: nothing starts
        closed = 0
        for wid in set(self.reserved) | (set(wins.some) if wins is not None else set()):
            until = self.until(wid)
            w = st.workers.get(wid)
            if w is not None and until is not None and w in st.free and not st.now < until < INF:
                closed += 1
        return len(st.free) > closed


def place_or_room(
    st: SchedState, job: Job, reserved: dict[str, float], windows: WindowHolds | None = None
) -> tuple[list[WorkerCapacity] | None, bool]:
    """`place`, and when nothing fits, whether the task would fit but for reservations
    (and maintenance windows).

    For a single-node task one walk of the free index answers both: a worker passed
    over only for its reservation is one where it would fit.
    """
    if not reserved and not windows:
        return place(st, job, reserved), False
    if job.manifest.node_range[1] != 1:
        placement = place(st, job, reserved, windows)
        return placement, placement is None and place(st, job, {}) is not None
    res = job.manifest.resources
    limit_end = st.now + job.time_limit if job.time_limit is not None else INF
    container = job.manifest.container is not None
    cores = job.manifest.cpu_cores
    room = False
    for w in st.free.fitting(res):
        if container and not w.containers:
            continue
        if cores and not cores_free(w, cores, st.jobs):
            continue
        until = _held_until(reserved, windows, w.worker_id)
        if until is not None and limit_end > until:
            room = True
            continue
        return [w], False
    return None, room


def _held_until(
    reserved: dict[str, float], windows: WindowHolds | None, worker_id: str
) -> float | None:
    t = reserved.get(worker_id) if reserved else None
    w = windows.at(worker_id) if windows else None
    if t is None or w is None:
        return w if t is None else t
    return min(t, w)


def place(
    st: SchedState, job: Job, reserved: dict[str, float], windows: WindowHolds | None = None
) -> list[WorkerCapacity] | None:
    """Best-fit workers for one task (rank order), honouring reservations and maintenance
    windows; None if none fit."""
    res = job.manifest.resources
    lo, hi = job.manifest.node_range
    limit_end = st.now + job.time_limit if job.time_limit is not None else INF
    fits: list[WorkerCapacity] = []
    head: WorkerCapacity | None = None
    container = job.manifest.container is not None
    cores = job.manifest.cpu_cores
    for w in st.free.fitting(res):
        if container and not w.containers:
            continue  # only a worker with a container runtime runs an image
        if cores and not cores_free(w, cores, st.jobs):
            continue  # its cores are missing there or held by another pinned job
        if reserved or windows:
            until = _held_until(reserved, windows, w.worker_id)
            if until is not None and limit_end > until:
                continue
        if hi == 1:
            return [w]
        fits.append(w)
        # Rank 0 hosts the rendezvous, so it needs a free master port on its worker.
        if head is None and w.fits(res, port=True):
            head = w
        if head is not None and len(fits) >= hi:
            break
    if len(fits) < lo or head is None:
        return None
    rest = [w for w in fits if w is not head][: hi - 1]
    return [head, *rest]
