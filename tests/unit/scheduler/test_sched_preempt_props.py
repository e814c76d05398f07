"""Preemption's invariants over random clusters and workloads (hypothesis).

Never a cycle, victims strictly of a lower tier in a queue their preemptor may
preempt, gangs stopped whole, and the fewest victims where that is easy to know.
"""

from __future__ import annotations

import itertools
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_harness import Harness, kills, manifest

from rbs.model import JobState, KillReason
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.events import RunRef, Submit, TaskExited
from rbs.scheduler.instructions import Accepted, Instruction, Note, Start
from rbs.scheduler.preempt import tier

CONFIG = SchedulerConfig(
    queues=(
        QueueConfig(name="low"),
        QueueConfig(name="mid", priority_weight=10, preempts=("low", "mid")),
        QueueConfig(
            name="high", priority_weight=100, preempts=("low", "mid"), preempt_mode="cancel"
        ),
    ),
    heartbeat_timeout=1e9,
    age_interval=1.0,
    age_max=1000,
)
PREEMPTED_FOR = re.compile(r"preempted for job (\d+) ")

jobs_st = st.fixed_dictionaries(
    {
        "queue": st.sampled_from(["low", "mid", "high"]),
        "priority": st.integers(-20, 20),
        "preemptible": st.booleans(),
        "cpus": st.integers(1, 4),
        "nodes": st.sampled_from([1, 1, 1, 2]),
    }
)
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), jobs_st),
        st.tuples(st.just("exit"), st.integers(0, 50)),
        st.tuples(st.just("tick"), st.integers(1, 30)),
    ),
    min_size=1,
    max_size=40,
)


def _has_cycle(edges: dict[int, set[int]]) -> bool:
    seen: dict[int, int] = {}  # 1: on the path, 2: done

    def visit(n: int) -> bool:
        seen[n] = 1
        for m in edges.get(n, ()):
            if seen.get(m) == 1 or (m not in seen and visit(m)):
                return True
        seen[n] = 2
        return False

    return any(n not in seen and visit(n) for n in list(edges))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workers=st.lists(st.tuples(st.integers(2, 4), st.integers(1, 3)), min_size=1, max_size=3),
    ops=ops_st,
)
def test_preemption_invariants(
    workers: list[tuple[int, int]], ops: list[tuple[str, object]]
) -> None:
    h = Harness(CONFIG)
    for i, (cpus, slots) in enumerate(workers):
        h.up(f"w{i}", cpus=cpus, slots=slots)
    now = 0.0
    edges: dict[int, set[int]] = {}
    running: dict[tuple[int, int], list[tuple[int, str]]] = {}  # (job, attempt) -> ranks
    replies: list[TaskExited] = []
    manifests = {}

    def check(out: list[Instruction]) -> None:
        for s in out:
            if isinstance(s, Start):
                running.setdefault((s.run.job_id, s.run.attempt), []).append(
                    (s.run.rank, s.worker_id)
                )
        preempt_kills = {
            (k.run.job_id, k.run.attempt, k.run.rank)
            for k in kills(out)
            if k.reason is KillReason.PREEMPT
        }
        for note in (i for i in out if isinstance(i, Note)):
            found = PREEMPTED_FOR.match(note.text)
            if found is None:
                continue
            victim, by = manifests[note.job_id], manifests[int(found.group(1))]
            assert victim.preemptible
            assert tier(CONFIG, victim) < tier(CONFIG, by)
            by_queue = CONFIG.queue(by.queue)
            assert by_queue is not None and victim.queue in by_queue.preempts
            edges.setdefault(int(found.group(1)), set()).add(note.job_id)
            assert not _has_cycle(edges)
            # A gang is stopped whole: every rank of the attempt gets its kill now.
            ranks = running[(note.job_id, note.attempt)]
            assert {(note.job_id, note.attempt, r) for r, _ in ranks} <= preempt_kills
        for job_id, attempt, rank in sorted(preempt_kills):
            worker = dict(running[(job_id, attempt)])[rank]
            run = RunRef(job_id=job_id, index=None, attempt=attempt, rank=rank)
            replies.append(TaskExited(run=run, worker_id=worker, exit_code=143, signal=15))

    for op, arg in ops:
        if op == "submit":
            assert isinstance(arg, dict)
            m = manifest(
                queue=arg["queue"],
                priority=arg["priority"],
                preemptible=arg["preemptible"] and arg["queue"] != "high",
                res=(arg["cpus"], 1, 0),
                nodes=arg["nodes"],
            )
            out = h.send(*replies, at=now)
            replies.clear()
            check(out)
            out = h.send(Submit(manifest=m))
            manifests.update({i.job_id: m for i in out if isinstance(i, Accepted)})
            check(out)
        elif op == "exit":
            assert isinstance(arg, int)
            live = [
                (j, a)
                for (j, a) in running
                if h.sched.job(j).state is JobState.RUNNING
                and any(r.attempt == a for r in h.sched.job(j).runs)
            ]
            if live:
                j, a = live[arg % len(live)]
                for rank, worker in running[(j, a)]:
                    run = RunRef(job_id=j, index=None, attempt=a, rank=rank)
                    replies.append(TaskExited(run=run, worker_id=worker, exit_code=0))
        else:
            assert isinstance(arg, int)
            now += arg
            out = h.send(*replies, at=now)
            replies.clear()
            check(out)


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    free_extra=st.integers(0, 3),
    need=st.integers(1, 8),
)
def test_the_fewest_victims_on_one_worker(sizes: list[int], free_extra: int, need: int) -> None:
    total = sum(sizes) + free_extra
    if need > total:
        need = total
    h = Harness(CONFIG)
    h.up("w", cpus=total, slots=len(sizes) + 1)
    victims = [h.submit(queue="low", preemptible=True, res=(c, 1, 0)) for c in sizes]
    assert all(h.state(v) is JobState.RUNNING for v in victims)
    out = h.send(Submit(manifest=manifest(queue="high", res=(need, 1, 0))))
    stopped = [k.run.job_id for k in kills(out) if k.reason is KillReason.PREEMPT]
    fewest = next(
        k
        for k in range(len(sizes) + 1)
        if any(free_extra + sum(c) >= need for c in itertools.combinations(sizes, k))
    )
    assert len(stopped) == fewest
    assert free_extra + sum(sizes[victims.index(j)] for j in stopped) >= need
