"""The server keeps ended jobs out of memory: restored as their final state only, shown
from the journal, and costing the server a bounded number of bytes each."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from rbs.model import JobManifest, JobState, Resources
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Submit, TaskExited, WorkerUp
from rbs.scheduler.instructions import Start
from rbs.scheduler.store import Store
from rbs.server.job_driver import JobDriver
from rbs.server.operations import OperationStore
from rbs.server.workers_service import HubConfig, WorkerHub

CONFIG = SchedulerConfig(heartbeat_timeout=1e9)
BATCH = 1000
# What an ended job may cost the server once restored: its entry in the driver's state
# map (the counts and `state_of`) and its byte in the core's. A held job costs over 1 KB.
BOUND = 256
T = TypeVar("T")


def journal_of_ended(data: Path, n: int) -> None:
    """`n` jobs that ran and completed, journaled as a server writes them."""
    data.mkdir(parents=True)
    store = Store(data / "jobs.db", durable=False)
    sched = Scheduler(CONFIG, forget_ended=True)
    big = WorkerUp(
        worker_id="w1",
        hostname="w1",
        address="10.0.0.1",
        cpu_millis=BATCH * 1000,
        memory_bytes=BATCH << 30,
        gpus=(),
        job_slots=BATCH,
    )
    store.step(sched, [big], 0.0)
    for first in range(0, n, BATCH):
        m = [
            JobManifest(name=f"j{i}", command=("true",), resources=Resources(cpu_millis=1000))
            for i in range(first, min(n, first + BATCH))
        ]
        out = store.step(sched, [Submit(manifest=x) for x in m], 1.0)
        exits = [
            TaskExited(run=s.run, worker_id=s.worker_id, exit_code=0)
            for s in out
            if isinstance(s, Start)
        ]
        assert len(exits) == len(m)
        store.step(sched, exits, 2.0)
    assert sched.job_ids() == []
    store.close()


def driver_on(data: Path) -> JobDriver:
    hub = WorkerHub(OperationStore(data / "execution.db"), HubConfig())
    return JobDriver(data, CONFIG, hub, clock=lambda: 3.0)


def bytes_held(make: Callable[[], T]) -> tuple[int, T]:
    """The bytes still allocated after `make()`, and what it made."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before, made
    finally:
        tracemalloc.stop()


def test_a_restart_keeps_ended_jobs_out_of_the_core_and_shows_them(tmp_path: Path) -> None:
    journal_of_ended(tmp_path / "d", 30)
    driver = driver_on(tmp_path / "d")
    try:
        assert driver.sched.job_ids() == []
        assert driver.job_counts() == {"COMPLETED": 30}
        view = driver.view(7)  # from the journal
        assert (view.name, view.state, view.exit_code) == ("j6", JobState.COMPLETED, 0)
        assert driver.state_of(30) is JobState.COMPLETED
    finally:
        driver.store.close()
        driver.logs.close()


def test_the_server_memory_per_ended_job_is_bounded(tmp_path: Path) -> None:
    small, big = 1_000, 11_000
    journal_of_ended(tmp_path / "small", small)
    journal_of_ended(tmp_path / "big", big)
    drivers = []
    try:
        held_small, d = bytes_held(lambda: driver_on(tmp_path / "small"))
        drivers.append(d)
        held_big, d = bytes_held(lambda: driver_on(tmp_path / "big"))
        drivers.append(d)
        per_job = (held_big - held_small) / (big - small)
        print(f"server: {per_job:.0f} B per ended job restored")
        assert per_job < BOUND, f"{per_job:.0f} B per ended job"
        # The measure sees held jobs: the same journal restored without compaction.
        store = Store(tmp_path / "big" / "jobs.db", durable=False)
        held_all, sched = bytes_held(lambda: store.restore(CONFIG, 3.0))
        assert len(sched.job_ids()) == big
        print(f"core without compaction: {held_all / big:.0f} B per ended job")
        assert held_all / big > 4 * BOUND
        store.close()
    finally:
        for d in drivers:
            d.store.close()
            d.logs.close()
