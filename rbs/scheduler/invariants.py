"""The scheduler's invariants, checked after every step in validate mode."""

from __future__ import annotations

import math
from collections import Counter

from rbs.model import JobState
from rbs.scheduler.policy import breakdown
from rbs.scheduler.state import InvariantError, Run, SchedState


def check_invariants(st: SchedState) -> None:
    """Raise InvariantError if the state breaks a rule; O(state), for tests and simulations."""
    expected: dict[str, list[tuple[tuple[int, int | None, int, int], object]]] = {}
    live = sum(1 for w in st.workers.values() if w.alive)
    _require(st.live_workers == live, f"{st.live_workers} workers counted up, {live} are")
    for job in st.jobs.values():
        _require(job.id not in st.ended, f"job {job.id} is held and forgotten at once")
        pool = job.pool
        total = job.manifest.array.size if job.manifest.array is not None else 1
        accounted = pool.pending + len(job.runs) + pool.finished
        _require(
            accounted == total, f"job {job.id}: {accounted} tasks accounted for, {total} exist"
        )
        throttle = job.manifest.array.throttle if job.manifest.array is not None else None
        if throttle is not None:
            _require(
                len(job.runs) <= throttle, f"job {job.id}: {len(job.runs)} running > %{throttle}"
            )
        if job.state is JobState.RUNNING:
            _require(bool(job.runs), f"job {job.id} is RUNNING without a run")
        elif job.state is JobState.PENDING:
            _require(
                not job.runs and pool.pending > 0, f"job {job.id} PENDING but runs or nothing left"
            )
        else:
            _require(not job.runs and pool.pending == 0, f"job {job.id} ended with tasks left")
        ready = bool(pool.pending) and job.eligible_time is not None and not job.state.terminal
        ready = ready and (throttle is None or len(job.runs) < throttle)
        _require(ready == (job.id in st.ready), f"job {job.id}: ready={ready} but queue disagrees")
        for raw, run in job.runs.items():
            _require(run.state is JobState.RUNNING, f"run {run.key} active but {run.state.value}")
            _require(job.raw_of(run.index) == raw, f"run {run.key} filed under index {raw}")
            lo, hi = job.manifest.node_range
            _require(lo <= len(run.nodes) <= hi, f"run {run.key} has {len(run.nodes)} nodes")
            _require(not run.nodes[0].exited, f"run {run.key} active after rank 0 exited")
            for node in run.live_nodes:
                expected.setdefault(node.worker_id, []).append((run.node_key(node.rank), node))
    for run in st.draining.values():
        _require(bool(run.live_nodes), f"draining run {run.key} has no live node")
        for node in run.live_nodes:
            expected.setdefault(node.worker_id, []).append((run.node_key(node.rank), node))
    for wid, w in st.workers.items():
        want = dict(expected.pop(wid, []))
        _require(want == w.allocs, f"worker {wid}: allocations differ from the runs placed there")
        if not w.alive:
            _require(not w.allocs, f"worker {wid} is down but holds allocations")
        nodes = list(w.allocs.values())
        gpus = Counter(g for n in nodes for g in n.gpus)
        _require(
            all(c == 1 for c in gpus.values()), f"worker {wid}: a GPU is assigned twice: {gpus}"
        )
        _require(set(gpus) <= set(w.gpus), f"worker {wid}: assigned GPUs it does not have")
        _require(not set(gpus) & set(w.free_gpus), f"worker {wid}: a GPU is both used and free")
        _require(set(gpus) | set(w.free_gpus) == set(w.gpus), f"worker {wid}: a GPU went missing")
        cpu = sum(n.cpu_millis for n in nodes)
        mem = sum(n.memory_bytes for n in nodes)
        _require(
            cpu <= w.cpu_millis and cpu == w.cpu_millis - w.free_cpu,
            f"worker {wid}: cpu over-committed",
        )
        _require(
            mem <= w.memory_bytes and mem == w.memory_bytes - w.free_mem,
            f"worker {wid}: memory over-committed",
        )
        _require(
            len(nodes) <= w.job_slots and w.free_slots == w.job_slots - len(nodes),
            f"worker {wid}: slots",
        )
        ports = [n.master_port for n in nodes if n.master_port is not None]
        _require(len(ports) == len(set(ports)), f"worker {wid}: a master port is used twice")
    _require(not expected, f"runs placed on unknown workers: {sorted(expected)}")
    check_indexes(st)


def check_indexes(st: SchedState) -> None:
    """The incremental structures agree with a recomputation from scratch."""
    free = sorted(
        (len(w.free_gpus), w.free_cpu, w.free_mem, w.free_slots, w.seq)
        for w in st.workers.values()
        if w.alive and w.reachable and w.free_slots > 0
    )
    _require(st.free.keys() == free, "the free index differs from the workers' free amounts")
    runs = [r for j in st.jobs.values() for r in j.runs.values()] + list(st.draining.values())
    want = {r.key: st.release_time(r) for r in runs if r.live_nodes}
    want = {k: t for k, t in want.items() if t != math.inf}
    _require(
        st.releases.keys() == set(want)
        and all(st.releases.time_of(k) == t for k, t in want.items()),
        "the release calendar differs from the runs' deadlines",
    )
    drains = sorted(
        (max(w.ends.values()), w.seq)
        for w in st.workers.values()
        if w.ends and max(w.ends.values()) != math.inf
    )
    _require(st.drains.keys() == drains, "the drain index differs from the workers' deadlines")
    for w in st.workers.values():
        _require(set(w.ends) == set(w.allocs), f"worker {w.worker_id}: release times differ")
        for key, t in w.ends.items():
            run = _run_of(st, key)
            _require(
                run is not None and st.release_time(run) == t,
                f"worker {w.worker_id}: allocation {key} has a stale release time",
            )
    unfinished = sum(1 for j in st.jobs.values() if not j.state.terminal)
    _require(
        st.unfinished == unfinished, f"{st.unfinished} unfinished jobs counted, {unfinished} exist"
    )
    at = st.ready.epoch * st.config.age_interval
    order = st.ready.order()
    ranked = sorted(
        order, key=lambda j: (-breakdown(st.config, j, at).total, j.eligible_time, j.id)
    )
    _require(order == ranked, "the ready queue is not in priority order")
    for res, n in st.capable_snapshot().items():
        real = sum(1 for w in st.workers.values() if w.alive and w.could_ever_fit(res))
        _require(n == real, f"{n} workers counted as able to hold {res}, {real} are")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvariantError(message)


def _run_of(st: SchedState, key: tuple[int, int | None, int, int]) -> Run | None:
    job = st.jobs.get(key[0])
    run = job.runs.get(job.raw_of(key[1])) if job is not None else None
    if run is not None and run.attempt == key[2]:
        return run
    return st.draining.get((key[0], key[1], key[2]))
