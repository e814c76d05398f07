"""`make demo`'s script on a copy of examples/: job targets built and run on a local cluster."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
VENV = Path(sys.executable).parent.parent


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (FileNotFoundError, IndexError):
        return False


def _stop(home: Path, env: dict[str, str]) -> None:
    """Stop what the demo started: the local cluster, then its second worker (by pid)."""
    subprocess.run(
        [sys.executable, "-m", "rbs", "remote", "down"], env=env, capture_output=True, timeout=60
    )
    with contextlib.suppress(FileNotFoundError, ValueError):
        pid = int((home / "worker2.state").read_text().split()[0])
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.slow
def test_demo_runs_the_example_job_targets(tmp_path: Path) -> None:
    if not (VENV / "bin" / "rbs").exists():
        pytest.skip(f"no rbs console script in {VENV}; run `make setup`")
    examples = tmp_path / "examples"
    shutil.copytree(EXAMPLES, examples, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    home = tmp_path / "home"
    env = {**os.environ, "RBS_HOME": str(home), "RBS_DEMO_VENV": str(VENV)}
    env.pop("RBS_REMOTE", None)
    try:
        run = subprocess.run(
            ["bash", str(examples / "demo.sh")],
            env=env,
            capture_output=True,
            text=True,
            timeout=110,
        )
        last = run.stdout.rstrip().splitlines()[-1] if run.stdout.strip() else ""
        url = last.rpartition(" ")[2]
        page = ""
        if url.startswith("http://127.0.0.1:"):  # the dashboard, before the cluster stops
            with urllib.request.urlopen(url + "ui/jobs?history=1", timeout=30) as resp:
                page = resp.read().decode()
    finally:
        _stop(home, env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    out = run.stdout
    assert '"name":"count_words"' in out  # the manifest the build wrote
    assert "48 words, 38 distinct" in out
    assert "simulated crash after step 3" in out
    assert "resumed from checkpoint at step 3" in out
    assert "done: model.json has 26 weights" in out
    assert out.count("rendezvous at 127.0.0.1:") == 2  # one per attempt
    assert "rbs remote down" in out
    assert last.startswith("Watch the demo's jobs in the dashboard (no login from this host): ")
    assert "count_words" in page and "train_2node" in page  # the demo's jobs, no login
    assert run.stderr.count(": COMPLETED") == 2
    counts = (home / "demo-outputs/count_words/counts.txt").read_text().splitlines()
    assert counts[0].split("\t")[1] in ("the", "a")
    model = json.loads((home / "demo-outputs/train_2node/model.json").read_text())
    assert len(model) == 26
