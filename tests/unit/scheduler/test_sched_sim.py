"""The simulator's batching quantum and its per-task stats switch (rbs/scheduler/sim.py)."""

from __future__ import annotations

from sched_harness import manifest, worker_up

from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.instructions import Instruction, Start
from rbs.scheduler.sim import Outcome, SimStats, Simulator


def _run(quantum: float, record_tasks: bool = True) -> tuple[SimStats, list[float], Scheduler]:
    sched = Scheduler(SchedulerConfig(heartbeat_timeout=1e12), validate=True)
    sim = Simulator(
        sched,
        lambda _: Outcome(duration=0.7),
        heartbeat=None,
        quantum=quantum,
        record_tasks=record_tasks,
    )
    start_times: list[float] = []

    def seen(out: list[Instruction], now: float) -> None:
        start_times.extend(now for i in out if isinstance(i, Start))

    sim.on_instructions = seen
    sim.add_worker(worker_up("w1", cpus=4, mem_gb=8, slots=4))
    for i in range(30):
        sim.submit(manifest(name=f"j{i}", res=(1, 1, 0)), time=0.1 * i + 0.05)
    return sim.run(), start_times, sched


def test_a_quantum_hands_what_happens_within_it_to_the_core_as_one_batch() -> None:
    exact, exact_starts, exact_sched = _run(0.0)
    batched, batched_starts, batched_sched = _run(1.0)
    assert exact.starts == batched.starts == 30
    assert not exact_sched.has_unfinished_jobs() and not batched_sched.has_unfinished_jobs()
    assert batched.batches < exact.batches / 3
    assert all(t == int(t) for t in batched_starts)  # every event at a whole quantum
    assert any(t != int(t) for t in exact_starts)
    assert max(batched_starts) >= max(exact_starts)  # rounding up never runs ahead


def test_without_per_task_stats_the_counts_remain() -> None:
    stats, _, _ = _run(0.0, record_tasks=False)
    assert stats.starts == 30
    assert stats.job_ids == [] and stats.starts_per_task == {}
    full, _, _ = _run(0.0)
    assert len(full.job_ids) == 30 and set(full.starts_per_task.values()) == {1}
