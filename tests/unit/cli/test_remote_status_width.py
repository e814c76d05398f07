"""`rbs remote status` fits an 80-column terminal and never cuts a worker id or a state."""

from __future__ import annotations

import re
import sys

import pytest

from rbs.cli.worker import _print_status
from rbs.wire.workers_images import LocalImageInfo
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


def test_the_images_table_fits_80_columns_and_keeps_ids_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    images = tuple(
        LocalImageInfo(
            image_id="sha256:" + f"{i:x}" * 64,
            names=(f"registry.example.org/team/very-long-training-image-name:2025-{i:02d}",),
            size_bytes=(i + 1) * 300 << 20,
        )
        for i in range(1, 4)
    )
    w = WorkerStatusInfo(
        worker_id="w-gpu-node-0001-3f9c2a71", state="CONNECTED", cpus=8, images=images
    )
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _print_status(ClusterStatusInfo(workers=(w,), now_ns=10**18))
    lines = ANSI.sub("", capsys.readouterr().out).splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    rows = [line for line in lines if "Mi" in line and w.worker_id in line]
    assert len(rows) == 3, lines
    for i, row in zip(range(1, 4), rows, strict=True):
        assert f"{i:x}" * 12 in row and f"{(i + 1) * 300:.1f}Mi" in row and " no " in row
