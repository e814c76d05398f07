"""`rbs build --remote` and `--remote-cache-only` against a real server and worker."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from exec_cluster import Cluster

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "WORKSPACE"
BANNER = "== greetings ==\nHELLO\nBONJOUR\nHOLA\n"


def rbs(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _ws(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    return dest


def _counts(stderr: str) -> tuple[int, int]:
    m = re.search(r"(\d+) run, (\d+) cache hits", stderr)
    assert m, stderr
    return int(m[1]), int(m[2])


@pytest.mark.timeout(180)
def test_build_remote_runs_on_the_cluster_and_shares_its_cache(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, token="tok").start()
    try:
        target = f"127.0.0.1:{cluster.port}"
        auth = {"RBS_REMOTE_TOKEN": "tok"}
        one = _ws(tmp_path, "one")
        r = rbs(one, "build", "//...", "--remote", target, env=auth)
        assert r.returncode == 0, r.stderr
        assert (one / "rbs-out/bin/greet/banner.txt").read_text() == BANNER
        executed, _ = _counts(r.stderr)
        assert executed > 0
        # The commands ran on the worker: the server recorded their operations.
        with sqlite3.connect(tmp_path / "server" / "execution.db") as db:
            (ops,) = db.execute("SELECT count(*) FROM operations WHERE stage = 4").fetchone()
        assert ops >= 3
        # A second workspace (fresh local state) is served by the cluster's cache.
        two = _ws(tmp_path, "two")
        again = rbs(two, "build", "//...", env={**auth, "RBS_REMOTE": target})
        assert again.returncode == 0, again.stderr
        # Every command action is a hit; only file writes and copies (never sent to a
        # cache or a worker) count as run.
        local_only, hits = _counts(again.stderr)
        assert hits >= 3 and local_only + hits == executed
        assert (two / "rbs-out/bin/greet/banner.txt").read_text() == BANNER
        # Cache-only: runs nothing remotely, and hits the same cache.
        three = _ws(tmp_path, "three")
        cached = rbs(three, "build", "//...", "--remote", target, "--remote-cache-only", env=auth)
        assert cached.returncode == 0, cached.stderr
        assert _counts(cached.stderr) == (local_only, hits)
        # Tests run on the cluster too.
        tests = rbs(one, "test", "//...", "--remote", target, env=auth)
        assert tests.returncode == 0 and "2 passed, 0 failed" in tests.stdout, tests.stderr
        # `rbs remote status` sees the worker and the (empty) job states.
        st = rbs(one, "remote", "status", "--server", target, "--json", env=auth)
        assert st.returncode == 0, st.stderr
        status = json.loads(st.stdout)
        (worker,) = status["workers"]
        assert worker["state"] == "CONNECTED" and worker["build_slots"] == 4
        assert status["queued_actions"] == 0 and "PENDING" in status["jobs_by_state"]
        table = rbs(one, "remote", "status", "--server", target, env=auth)
        assert table.returncode == 0 and "CONNECTED" in table.stdout
        # Without the token the server refuses, and the build says why.
        four = _ws(tmp_path, "four")
        refused = rbs(four, "build", "//...", "--remote", target, env={"RBS_REMOTE_TOKEN": ""})
        assert refused.returncode != 0
        assert "UNAUTHENTICATED" in refused.stderr
    finally:
        cluster.stop()


def test_remote_cache_only_needs_remote(tmp_path: Path) -> None:
    ws = _ws(tmp_path, "ws")
    r = rbs(ws, "build", "//...", "--remote-cache-only", env={"RBS_REMOTE": ""})
    assert r.returncode == 2 and "--remote-cache-only needs --remote" in r.stderr
