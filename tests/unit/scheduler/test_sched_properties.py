"""Hypothesis: random submissions, worker churn, exits, cancels and ticks never break the invariants.

The scheduler runs in validate mode, so every step also checks: %N throttles, no GPU
card assigned twice, no over-commit, every RUNNING job has a worker, legal state moves.
Every step is journaled, and a `restart` rule rebuilds the scheduler from the journal.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sched_harness import GIB, worker_up

from rbs.model import ArraySpec, Dependency, DepKind, JobManifest, JobState, Resources
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import (
    Cancel,
    Event,
    Heartbeat,
    Requeue,
    RunRef,
    Submit,
    TaskExited,
    TaskRef,
    Tick,
    WorkerDown,
)
from rbs.scheduler.instructions import Accepted, Instruction, Kill, Start
from rbs.scheduler.sim import Outcome, Simulator
from rbs.scheduler.store import Store

WORKERS = ("w0", "w1", "w2", "w3")
CONFIG = SchedulerConfig(
    queues=(QueueConfig(name="batch"), QueueConfig(name="hi", priority_weight=10)),
    heartbeat_timeout=20,
    age_interval=5,
)

resources = st.builds(
    Resources,
    cpu_millis=st.sampled_from([500, 1000, 2000, 4000]),
    memory_bytes=st.sampled_from([GIB, 2 * GIB, 8 * GIB]),
    gpus=st.integers(0, 2),
)


@st.composite
def manifests(draw: st.DrawFn, existing: list[int]) -> JobManifest:
    kind = draw(st.sampled_from(["single", "array", "gang"]))
    array = None
    nodes = 1
    if kind == "array":
        first = draw(st.integers(0, 5))
        last = first + draw(st.integers(0, 12))
        throttle = draw(st.none() | st.integers(1, 4))
        array = ArraySpec(ranges=((first, last, draw(st.integers(1, 3))),), throttle=throttle)
    elif kind == "gang":
        nodes = draw(st.integers(2, 3))
    deps: tuple[Dependency, ...] = ()
    if existing and draw(st.booleans()):
        deps = (
            Dependency(
                kind=draw(st.sampled_from(list(DepKind))), job_id=draw(st.sampled_from(existing))
            ),
        )
    return JobManifest(
        name="p",
        command=("x",),
        resources=draw(resources),
        queue=draw(st.sampled_from(["batch", "hi"])),
        priority=draw(st.integers(0, 3)),
        time_limit=draw(st.none() | st.integers(3, 30)),
        nodes=nodes,
        max_retries=draw(st.integers(0, 2)),
        requeue=draw(st.booleans()),
        array=array,
        dependencies=deps,
    )


class SchedulerMachine(RuleBasedStateMachine):
    """Drives the core like a cluster would and keeps its own record of what runs where."""

    FORGET = False  # the core compacts ended jobs out (as the server runs it)

    def __init__(self) -> None:
        super().__init__()
        self.sched = Scheduler(CONFIG, validate=True, forget_ended=self.FORGET)
        self.store = Store(":memory:")
        self.now = 0.0
        self.jobs: list[int] = []
        self.up: set[str] = set()
        self.live: dict[tuple[int, int | None, int, int], str] = {}  # node -> worker
        # Attempts that are over or being stopped: a rank was told to stop, or rank 0
        # (which decides how a gang ends) exited. Their other ranks may still be
        # draining while the next attempt runs elsewhere.
        self.stopping: set[tuple[int, int | None, int]] = set()

    def send(self, *events: Event) -> list[Instruction]:
        out = self.sched.handle_many(events, self.now)
        self.store.apply(out, self.now)
        for ins in out:
            if isinstance(ins, Start):
                key = (ins.run.job_id, ins.run.index, ins.run.attempt, ins.run.rank)
                assert key not in self.live, f"started twice: {key}"
                self.live[key] = ins.worker_id
            elif isinstance(ins, Kill):
                self.stopping.add((ins.run.job_id, ins.run.index, ins.run.attempt))
            elif isinstance(ins, Accepted):
                self.jobs.append(ins.job_id)
        return out

    @rule(
        wid=st.sampled_from(WORKERS),
        cpus=st.integers(2, 8),
        gpus=st.integers(0, 3),
        slots=st.integers(1, 4),
    )
    def worker_up(self, wid: str, cpus: int, gpus: int, slots: int) -> None:
        running = tuple(
            RunRef(job_id=k[0], index=k[1], attempt=k[2], rank=k[3])
            for k, w in self.live.items()
            if w == wid
        )
        if wid in self.up:
            return  # a live worker does not re-register with other figures
        self.send(worker_up(wid, cpus=cpus, mem_gb=16, gpus=gpus, slots=slots, running=running))
        self.up.add(wid)

    @rule(data=st.data())
    def submit(self, data: st.DataObject) -> None:
        self.send(Submit(manifest=data.draw(manifests(self.jobs))))

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), code=st.sampled_from([0, 0, 1]), oom=st.booleans())
    def exit(self, data: st.DataObject, code: int, oom: bool) -> None:
        key = data.draw(st.sampled_from(sorted(self.live, key=str)))
        worker = self.live.pop(key)
        if key[3] == 0:
            self.stopping.add((key[0], key[1], key[2]))
        run = RunRef(job_id=key[0], index=key[1], attempt=key[2], rank=key[3])
        self.send(TaskExited(run=run, worker_id=worker, exit_code=code, oom=oom and code != 0))

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        jid = data.draw(st.sampled_from(self.jobs))
        index = data.draw(st.none() | st.integers(0, 20))
        if jid not in self.sched.job_ids():
            rec = self.store.job_record(jid)  # ended and forgotten: the journal has it
            assert self.FORGET and rec is not None and rec.state.terminal
        elif self.sched.job(jid).array is None:
            index = None
        self.send(Cancel(targets=(TaskRef(job_id=jid, index=index),)))

    @precondition(lambda self: bool(self.jobs))
    @rule(data=st.data(), preempt=st.booleans())
    def requeue(self, data: st.DataObject, preempt: bool) -> None:
        self.send(
            Requeue(
                targets=(TaskRef(job_id=data.draw(st.sampled_from(self.jobs))),), preempt=preempt
            )
        )

    @precondition(lambda self: bool(self.up))
    @rule(data=st.data(), announce=st.booleans())
    def worker_down(self, data: st.DataObject, announce: bool) -> None:
        wid = data.draw(st.sampled_from(sorted(self.up)))
        self.up.discard(wid)
        for key in [k for k, w in self.live.items() if w == wid]:
            del self.live[key]  # its processes died with it
        if announce:
            self.send(WorkerDown(worker_id=wid))

    @rule(dt=st.floats(0.1, 15))
    def tick(self, dt: float) -> None:
        self.now += dt
        self.send(*(Heartbeat(worker_id=w) for w in sorted(self.up)), Tick())

    @rule()
    def restart(self) -> None:
        """The server restarts from its journal: the rebuilt scheduler is the same."""
        before = self.sched.snapshot()
        self.sched = self.store.restore(CONFIG, self.now, validate=True, forget_ended=self.FORGET)
        assert self.sched.snapshot() == before

    @invariant()
    def killed_runs_are_not_restarted_and_tasks_run_once(self) -> None:
        active: dict[tuple[int, int | None], set[int]] = {}
        for job_id, index, attempt, _ in self.live:
            if (job_id, index, attempt) in self.stopping:
                continue
            active.setdefault((job_id, index), set()).add(attempt)
        for task, attempts in active.items():
            # Old attempts may still be stopping, but only one is ever meant to run.
            assert len(attempts) <= 1, f"task {task} runs attempts {sorted(attempts)} at once"

    @invariant()
    def terminal_jobs_hold_nothing(self) -> None:
        held = set(self.sched.job_ids())
        states = self.sched.job_states()
        for jid in self.jobs:
            if jid not in held:  # forgotten: ended, and nothing of it left running
                assert self.FORGET and states[jid].terminal
                assert not [r for r in self.store.task_history(jid) if r.active]
                continue
            view = self.sched.job(jid)
            if view.state.terminal:
                assert not view.runs


class ForgettingMachine(SchedulerMachine):
    """The same rules against a core that forgets ended jobs (`forget_ended`)."""

    FORGET = True


TestSchedulerMachine = SchedulerMachine.TestCase
TestForgettingMachine = ForgettingMachine.TestCase
# Derandomized: CI runs the same examples every time (a random seed once drew a case
# that ran past the test timeout); set derandomize=False locally to search wider.
TestSchedulerMachine.settings = TestForgettingMachine.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data(), n_jobs=st.integers(1, 25), seed=st.integers(0, 2**16))
def test_every_job_ends_when_workers_suffice(data: st.DataObject, n_jobs: int, seed: int) -> None:
    sched = Scheduler(CONFIG, validate=True)
    rng_codes = [0, 0, 1, 137]

    def behaviour(start: Start) -> Outcome:
        pick = (start.run.job_id * 31 + (start.run.index or 0) * 7 + start.run.attempt + seed) % 4
        return Outcome(duration=1.0 + pick, exit_code=rng_codes[pick], oom=rng_codes[pick] == 137)

    sim = Simulator(sched, behaviour, tick=1.0, heartbeat=5.0)
    for wid in WORKERS:
        sim.add_worker(worker_up(wid, cpus=8, mem_gb=32, gpus=3, slots=4), time=0.0)
    ids: list[int] = []
    for i in range(n_jobs):
        m = data.draw(manifests(list(range(1, i + 1))))
        sim.submit(m, time=i * 0.5)
        ids.append(i + 1)
    if data.draw(st.booleans()):
        sim.fail_worker("w1", time=3.0, announce=data.draw(st.booleans()))
    stats = sim.run(until=10_000)
    assert not stats.rejected
    for jid in ids:
        view = sched.job(jid)
        assert view.state.terminal, f"job {jid} stuck {view.state.value} ({view.reason})"
        for dep, target_state in view.dependencies:
            if view.reason == "DependencyNeverSatisfied":
                continue
            kind = dep.split(":")[0]
            if view.start_time is not None and kind == "afterok":
                assert target_state is JobState.COMPLETED
