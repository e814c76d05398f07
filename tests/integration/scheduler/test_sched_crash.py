"""kill -9 of a journaling scheduler under load: the reopened journal loses nothing committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rbs.scheduler.core import Snapshot
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

    # Replay the same deterministic run and keep the snapshots around the kill.
    snaps: dict[int, Snapshot] = {}
    count = 0

    def record(_: list[Instruction], __: float) -> None:
        nonlocal count
        count += 1
        if count >= reported:
            snaps[count] = sim.scheduler.snapshot()
        if count > reported:
            raise _Enough

    sim = child.build(record)
    with pytest.raises(_Enough):
        sim.run()

    restored = Store(db).restore(child.CONFIG, now=0.0, validate=True).snapshot()
    # The child may have committed one batch more than it managed to report.
    assert restored in (snaps[reported], snaps[reported + 1])
    jobs = {j.job_id for j in restored.jobs}
    assert jobs == set(range(1, max(jobs) + 1)), "a journaled job went missing"
