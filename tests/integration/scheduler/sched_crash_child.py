"""A deterministic journaled simulation, run as a child process that the crash test kills."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable

from rbs.model import JobManifest, Resources
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import WorkerUp
from rbs.scheduler.instructions import Instruction, Start
from rbs.scheduler.sim import Outcome, Simulator
from rbs.wire.specs import parse_array, parse_dependencies

CONFIG = SchedulerConfig(heartbeat_timeout=30)


def build(hook: Callable[[list[Instruction], float], None]) -> Simulator:
    """The same workload every time: arrays, dependencies, gangs, failures and retries."""
    rng = random.Random(42)

    def behaviour(_: Start) -> Outcome:
        return Outcome(duration=rng.uniform(0.5, 20), exit_code=rng.choice((0, 0, 0, 2)))

    sim = Simulator(Scheduler(CONFIG), behaviour, tick=1.0)
    sim.on_instructions = hook
    for w in range(4):
        sim.add_worker(
            WorkerUp(
                worker_id=f"w{w}",
                hostname=f"h{w}",
                cpu_millis=8000,
                memory_bytes=32 << 30,
                gpus=("0", "1"),
                job_slots=6,
            )
        )
    for i in range(400):
        deps = parse_dependencies(f"afterany:{i - 3}") if i > 5 and i % 4 == 0 else ()
        sim.submit(
            JobManifest(
                name=f"j{i}",
                command=("run",),
                resources=Resources(
                    cpu_millis=1000 * (1 + i % 3), memory_bytes=1 << 30, gpus=i % 2
                ),
                array=parse_array("0-19%4") if i % 25 == 0 else None,
                nodes=2 if i % 30 == 7 else 1,
                max_retries=1,
                dependencies=deps,
            ),
            time=i * 0.1,
        )
    return sim


def main() -> None:
    from rbs.scheduler.store import Store

    store = Store(sys.argv[1])
    batches = 0

    def journal(out: list[Instruction], now: float) -> None:
        nonlocal batches
        store.apply(out, now)
        batches += 1
        # Reported only after the commit returned: the parent may kill us at any moment.
        print(batches, flush=True)

    build(journal).run()
    print("done", flush=True)


if __name__ == "__main__":
    main()
