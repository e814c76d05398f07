"""`rbs remote worker --run-uids`: a bad value or a work dir runs cannot reach is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rbs", "remote", "worker", "--server", "127.0.0.1:1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_bad_range_names_the_flag_and_the_fix(tmp_path: Path) -> None:
    r = _worker("--work-dir", str(tmp_path / "w"), "--run-uids", "5-3")
    assert r.returncode == 1
    assert "--run-uids 5-3: give FIRST-LAST with 1 <= FIRST <= LAST" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only the work dir's reach is checked")
def test_a_work_dir_runs_cannot_reach_is_refused_naming_the_folder(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    r = _worker("--work-dir", str(closed / "w"), "--run-uids", "200000-265535")
    assert r.returncode == 1
    assert f"{closed} is not searchable by other users" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
