"""`rbs remote status` fits an 80-column terminal and never cuts a worker id or a state."""

from __future__ import annotations

import re
import sys

import pytest

from rbs.cli.worker import _print_status
from rbs.wire.workers_status import ClusterStatusInfo, WorkerStatusInfo

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_status_at_80_columns_keeps_ids_and_states_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    workers = tuple(
        WorkerStatusInfo(
            worker_id=f"w-gpu-node-{i:04d}-3f9c2a71",
            name=f"gpu-node-{i:04d}.cluster.example.org",
            hostname="h",
            cpus=128,
            memory_bytes=1 << 40,
            gpu_ids=tuple(str(g) for g in range(8)),
            build_slots=64,
            build_slots_used=3,
            job_slots=16,
            job_slots_used=12,
            state="DISCONNECTED" if i % 2 else "CONNECTED",
            last_heartbeat_ns=10**18,
        )
        for i in range(3)
    )
    reply = ClusterStatusInfo(workers=workers, jobs_by_state=(("RUNNING", 3),), now_ns=10**18)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _print_status(reply)
    text = ANSI.sub("", capsys.readouterr().out)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    for w in workers:
        row = next(line for line in lines if w.worker_id in line)
        assert w.state in row
