"""`rbs job` as a user sees a job end: exit codes of submit --wait and -f, Ctrl-C, labels, refusals."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

CLUSTER = EmbeddedCluster(timeout=180)
rbs = CLUSTER.rbs


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


@pytest.mark.parametrize(
    ("flags", "script", "status", "shown"),
    [
        ((), "exit 0", 0, "COMPLETED"),
        ((), "exit 7", 7, "FAILED:exit 7"),
        ((), "kill -TERM $$", 128 + 15, "FAILED:signal 15 (SIGTERM)"),
        (("--time", "1s"), "exec sleep 60", 124, "TIMEOUT:time limit 1s"),
    ],
)
@pytest.mark.parametrize("how", ["--wait", "-f"])
def test_submit_wait_and_follow_exit_with_the_jobs_status(
    home: Path, how: str, flags: tuple[str, ...], script: str, status: int, shown: str
) -> None:
    r = rbs(home, "job", "submit", how, *flags, "--", "sh", "-c", f"echo out-line; {script}")
    assert r.returncode == status, (r.stdout, r.stderr)
    job = r.stdout.splitlines()[0]
    assert f"job {job}: {shown}" in r.stderr
    if how == "-f":
        assert "out-line" in r.stdout.splitlines()  # the log was streamed
        assert "[rbs] ended" in r.stdout


def test_an_array_follows_with_labels_and_exits_with_its_highest_code(home: Path) -> None:
    cmd = 'echo "hello from $RBS_ARRAY_INDEX"; exit $RBS_ARRAY_INDEX'
    r = rbs(home, "job", "submit", "-f", "--array", "0-2", "--", "sh", "-c", cmd)
    assert r.returncode == 2, r.stderr
    lines = r.stdout.splitlines()
    assert {"[0] hello from 0", "[1] hello from 1", "[2] hello from 2"} <= set(lines)
    job = lines[0]
    assert f"job {job}: FAILED:2 of 3 tasks FAILED, highest exit 2" in r.stderr
    r = rbs(home, "job", "logs", job)
    assert "[2] hello from 2" in r.stdout.splitlines()
    # One task asked for by ID_INDEX: its lines need no label.
    assert "hello from 1" in rbs(home, "job", "logs", f"{job}_1").stdout.splitlines()


def test_logs_label_prefixes_a_plain_jobs_lines_only_when_asked(home: Path) -> None:
    r = rbs(home, "job", "submit", "--wait", "--", "echo", "plain")
    job = r.stdout.strip()
    assert "plain" in rbs(home, "job", "logs", job).stdout.splitlines()
    # A single job has no task or rank to name: --label changes nothing there.
    assert "plain" in rbs(home, "job", "logs", "--label", job).stdout.splitlines()


def test_ctrl_c_while_following_exits_130_and_leaves_the_job_running(
    home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    cmd = f"touch {marker}; echo waiting; exec sleep 300"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rbs", "job", "submit", "-f", "--", "sh", "-c", cmd],
        env=CLUSTER.env(home),
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        job = proc.stdout.readline().strip()
        assert job.isdigit()
        # Following: the job's own line came through the stream.
        for _ in range(1000):
            line = proc.stdout.readline()
            if line.strip() == "waiting" or not line:
                break
        assert line.strip() == "waiting"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert f"Follow it again with: rbs job logs -f {job}" in err
        assert "Traceback" not in err
        shown = json.loads(rbs(home, "job", "show", "--json", job).stdout)
        assert shown["state"] == "RUNNING"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    r = rbs(home, "job", "cancel", job)
    assert r.returncode == 0, r.stderr
    # Cancelling it again, once it ended, says so and exits 1.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = json.loads(rbs(home, "job", "show", "--json", job).stdout)["state"]
        if state == "CANCELLED":
            break
    r = rbs(home, "job", "cancel", job)
    assert r.returncode == 1
    assert f"job {job} had already ended (CANCELLED:cancelled" in r.stderr


def test_restarts_and_deadline_flags_land_in_the_manifest(home: Path) -> None:
    r = rbs(home, "job", "submit", "--restarts", "3", "--deadline", "now+1h", "--", "true")
    assert r.returncode == 0, r.stderr
    m = json.loads(rbs(home, "job", "show", "--json", r.stdout.strip()).stdout)["manifest"]
    assert m["restarts"] == 3 and m["requeue"] is True
    assert m["deadline"] > time.time() + 3000
    r = rbs(home, "job", "submit", "--restarts", "0", "--", "true")
    m = json.loads(rbs(home, "job", "show", "--json", r.stdout.strip()).stdout)["manifest"]
    assert (m["restarts"], m["requeue"]) == (0, False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--inputs", "x="), "--inputs 'x=': SRC is empty"),
        (("--env", "RBS_JOB_ID=7"), "--env 'RBS_JOB_ID=7': env variable RBS_JOB_ID is set by"),
        (("--restarts", "-1"), "--restarts"),
        (("--deadline", "yesterday"), "--deadline 'yesterday': not a time"),
    ],
)
def test_refusals_name_the_flag_and_the_value(
    home: Path, args: tuple[str, ...], message: str
) -> None:
    r = rbs(home, "job", "submit", *args, "--", "true")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr
    assert r.stdout == ""


def test_no_worker_can_ever_run_it_in_human_units(home: Path) -> None:
    r = rbs(home, "job", "submit", "--memory-gb", "1000", "--", "true")
    assert r.returncode == 2
    assert "no worker can ever run this job: it asks for cpu 1, memory 1000.0 GiB" in r.stderr
    assert re.search(r"the largest worker is \S+: cpu \d+, memory \d+\.\d [GT]iB", r.stderr)


def test_show_prints_the_state_with_its_reason_and_every_attempt(home: Path) -> None:
    r = rbs(home, "job", "submit", "--wait", "--max-retries", "1", "--", "sh", "-c", "exit 4")
    assert r.returncode == 4, r.stderr
    job = r.stdout.strip()
    out = rbs(home, "job", "show", job).stdout
    assert "FAILED:exit 4" in out and "Attempts" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["-"]]
    assert [row[1] for row in rows] == ["1", "2"], out  # both attempts, in order
    history = json.loads(rbs(home, "job", "show", "--json", job).stdout)["history"]
    assert [(a["attempt"], a["state"], a["reason"], a["exit_code"]) for a in history] == [
        (1, "FAILED", "exit 4", 4),
        (2, "FAILED", "exit 4", 4),
    ]
