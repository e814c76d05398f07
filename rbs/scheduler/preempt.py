"""Preemption: a pending job that cannot fit stops preemptible runs of a lower tier.

A job's tier is its base priority plus its queue's weight, never the age bonus, so
two jobs can never preempt each other in turn: the victim's tier is strictly lower,
and waiting does not raise it. A queue preempts only the queues its `preempts` names.

The pass calls `preempt` where a job fails for `Resources`. On each worker that could
ever hold one of its tasks, what is free now plus what runs already being stopped
hold counts first; if that is not enough, the fewest runs (then the lowest tiers)
whose nodes there free the rest are the worker's victims. The `lo` cheapest workers
are chosen, and their victims stopped with reason PREEMPT: SIGTERM and the grace
period, as a cancel, so the checkpoint folder and outputs are saved as on any ending.
A gang is stopped whole, since stopping a run stops every rank. The next pass, once
the victims have exited, places the job as usual. What becomes of a victim is its own
queue's `preempt_mode` (rbs.scheduler.lifecycle.lost).

Cost: O(runs on the workers examined) per preempting job, and only for jobs whose
queue preempts some queue; at most `SCAN_BUDGET` workers that could hold the job are
examined (the first registered), so the fewest victims are those among them. A pass
then closes the job's shape as for any failure.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from rbs.model import JobManifest, KillReason
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.instructions import JobChange, Note
from rbs.scheduler.lifecycle import find_run, stop_run
from rbs.scheduler.pinning import worker_cores
from rbs.scheduler.preempt_holds import held_for_other, hold
from rbs.scheduler.state import Job, Run, SchedState, SchedulerError
from rbs.scheduler.workers import WorkerCapacity

# Candidates per worker searched exactly for the fewest victims; beyond, greedily.
EXACT_UP_TO = 10
# Workers that could hold the job examined per preemption, in registration order: what
# bounds its cost on a large cluster (the fewest victims are found among these).
SCAN_BUDGET = 64
MAX_CHANGES = 50

Free = tuple[int, int, int, int]  # cpu millis, memory bytes, GPUs, job slots


def tier(config: SchedulerConfig, m: JobManifest) -> int:
    """Base priority plus the queue's weight: what preemption compares (no age bonus)."""
    q = config.queue(m.queue)
    return m.priority + (q.priority_weight if q is not None else 0)


def preempted_queues(config: SchedulerConfig) -> set[str]:
    """The queues some queue may preempt."""
    return {name for q in config.queues for name in q.preempts}


def check_submit(config: SchedulerConfig, m: JobManifest) -> None:
    """Refuse `--preemptible` on a queue that no queue may preempt (it would mean nothing)."""
    if not m.preemptible or m.queue in preempted_queues(config):
        return
    open_queues = sorted(preempted_queues(config))
    where = (
        f"submit to a queue that can be preempted ({', '.join(open_queues)}) or drop it"
        if open_queues
        else 'no queue has preempts = ["..."] in the server\'s config; drop the flag'
    )
    raise SchedulerError(
        f"--preemptible: queue {m.queue} is never preempted (no queue lists it in "
        f"preempts); {where}"
    )


def victims_needed(
    free: Free, need: Free, candidates: Sequence[tuple[int, Free, Run]]
) -> list[Run] | None:
    """The fewest candidates (then the lowest tiers) whose nodes, added to `free`, meet
    `need`; None when all of them are not enough. `candidates`: (tier, node's
    resources, run), one per run."""

    def fits(chosen: Iterable[tuple[int, Free, Run]]) -> bool:
        got = list(free)
        for _, res, _ in chosen:
            for i in range(4):
                got[i] += res[i]
        return all(got[i] >= need[i] for i in range(4))

    if fits(()):
        return []
    if not fits(candidates):
        return None
    if len(candidates) <= EXACT_UP_TO:
        for k in range(1, len(candidates) + 1):
            best: tuple[int, ...] | None = None
            best_cost = 0
            for combo in itertools.combinations(range(len(candidates)), k):
                picked = [candidates[i] for i in combo]
                cost = sum(c[0] for c in picked)
                if (best is None or cost < best_cost) and fits(picked):
                    best, best_cost = combo, cost
            if best is not None:
                return [candidates[i][2] for i in best]
    # Many small runs on one big worker: lowest tier first, the biggest first among equals.
    order = sorted(candidates, key=lambda c: (c[0], -c[1][0], -c[1][1], -c[1][2]))
    chosen: list[tuple[int, Free, Run]] = []
    for c in order:
        chosen.append(c)
        if fits(chosen):
            return [r for _, _, r in chosen]
    return None  # pragma: no cover - fits(candidates) held above


def preempt(st: SchedState, job: Job) -> bool:
    """Stop the runs that free room for one task of `job`; whether room is on its way
    (victims stopped now, or runs already stopping that free enough)."""
    m = job.manifest
    cfg = st.config
    queue = cfg.queue(m.queue)
    if queue is None or not queue.preempts:
        return False
    res, lo = m.resources, m.node_range[0]
    my_tier = tier(cfg, m)
    need: Free = (res.cpu_millis, res.memory_bytes, res.gpus, 1)
    options: list[tuple[int, int, str, list[Run]]] = []
    examined = 0
    for w in st.workers.values():
        if not (w.alive and w.reachable and w.could_ever_fit(res)):
            continue
        if m.container is not None and not w.containers:
            continue
        if m.cpu_cores and max(m.cpu_cores) >= worker_cores(w):
            continue  # the worker lacks a core the job is pinned to
        if held_for_other(st, w.worker_id, job.id):
            continue  # what it frees is promised to another preemptor
        examined += 1
        if examined > max(SCAN_BUDGET, lo):
            break
        found = _worker_victims(st, w, need, my_tier, queue.preempts, m.cpu_cores)
        if found is not None:
            cost = sum(tier(cfg, st.jobs[r.job_id].manifest) for r in found)
            options.append((len(found), cost, w.worker_id, found))
    if len(options) < lo:
        return False
    options.sort(key=lambda o: (o[0], o[1], o[2]))
    victims: dict[tuple[int, int | None, int], Run] = {}
    for _, _, _, found in options[:lo]:
        for run in found:
            victims[run.key] = run
    for run in victims.values():
        _stop(st, job, run, my_tier)
    if victims:  # hold what they free for this job (preempt_holds.py)
        hold(st, job, [wid for _, _, wid, _ in options[:lo]])
    return True


def _worker_victims(
    st: SchedState,
    w: WorkerCapacity,
    need: Free,
    my_tier: int,
    queues: tuple[str, ...],
    cores: tuple[int, ...] = (),
) -> list[Run] | None:
    """The fewest runs on `w` whose stop frees `need` (and, for a job pinned to `cores`,
    every run pinned to one of them); None when that cannot be done."""
    free = [w.free_cpu, w.free_mem, len(w.free_gpus), w.free_slots]
    candidates: list[tuple[int, Free, Run]] = []
    forced: list[Run] = []  # pinned runs holding one of `cores`: they must stop
    seen: set[tuple[int, int | None, int]] = set()
    for key, node in w.allocs.items():
        run = find_run(st, key[0], key[1], key[2])
        if run is None or run.key in seen:
            continue
        seen.add(run.key)
        held: Free = (node.cpu_millis, node.memory_bytes, len(node.gpus), 1)
        current = st.jobs[run.job_id].runs.get(Job.raw_of(run.index)) is run
        if run.ending is not None or not current:
            # Already stopping: its room is on the way, at no cost.
            for i in range(4):
                free[i] += held[i]
            continue
        victim = st.jobs[run.job_id].manifest
        eligible = victim.preemptible and victim.queue in queues
        t = tier(st.config, victim)
        if cores and not set(cores).isdisjoint(victim.cpu_cores):
            if not (eligible and t < my_tier):
                return None  # a core the job needs is held by a run it may not stop
            forced.append(run)
            for i in range(4):
                free[i] += held[i]
        elif eligible and t < my_tier:
            candidates.append((t, held, run))
    rest = victims_needed((free[0], free[1], free[2], free[3]), need, candidates)
    return None if rest is None else forced + rest


def _stop(st: SchedState, job: Job, run: Run, my_tier: int) -> None:
    victim = st.jobs[run.job_id]
    change = JobChange(action=f"preempted for job {job.id}", by=job.user, at=st.now)
    victim.changes = (*victim.changes, change)[-MAX_CHANGES:]
    st.touch(victim)
    q = st.config.queue(victim.manifest.queue)
    mode = q.preempt_mode if q is not None else "requeue"
    then = (
        "it goes back to PENDING (preemption spends neither --max-retries nor --restarts)"
        if mode == "requeue" and victim.manifest.requeue
        else "it ends PREEMPTED"
    )
    text = (
        f"preempted for job {job.id} (queue {job.manifest.queue}, tier {my_tier} above "
        f"this job's {tier(st.config, victim.manifest)}): stopping with SIGTERM and the "
        f"grace period; its checkpoint folder and outputs are saved; {then}"
    )
    st.actions.append(Note(job_id=victim.id, index=run.index, attempt=run.attempt, text=text))
    stop_run(st, run, KillReason.PREEMPT)
