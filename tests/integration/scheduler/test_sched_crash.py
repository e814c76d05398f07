"""kill -9 of a journaling scheduler under load: the reopened journal loses nothing committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rbs.scheduler.instructions import Instruction
from rbs.scheduler.store import Store

sys.path.insert(0, str(Path(__file__).parent))
import sched_crash_child as child

pytestmark = pytest.mark.chaos

KILL_AFTER = 300  # batches, well inside the workload


class _Enough(Exception):
    pass


def test_kill_9_mid_run_restores_the_last_committed_state(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(Path(child.__file__).parent), *sys.path])
    )
    proc = subprocess.Popen(
        [sys.executable, child.__file__, str(db)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    reported = 0
    try:
        for line in proc.stdout:
            assert line.strip() != "done", "the workload ended before the kill"
            reported = int(line)
            if reported >= KILL_AFTER:
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    # The child runs on while the kill is on its way (on a loaded machine, several
    # batches), so the journal holds the state after some whole batch at or after the
    # last one reported: replay the same deterministic run and find that batch.
    restored = Store(db).restore(child.CONFIG, now=0.0, validate=True).snapshot()
    count = 0
    found: int | None = None

    def record(_: list[Instruction], __: float) -> None:
        nonlocal count, found
        count += 1
        if count >= reported and sim.scheduler.snapshot() == restored:
            found = count
            raise _Enough

    sim = child.build(record)
    with pytest.raises(_Enough):
        sim.run()  # ends without a match: the journal lost or half-applied a batch
    assert found is not None and found >= reported, (found, reported)
    jobs = {j.job_id for j in restored.jobs}
    assert jobs == set(range(1, max(jobs) + 1)), "a journaled job went missing"
