"""`rbs job` against the embedded local cluster (RBS_HOME in a temp folder), as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

CLUSTER = EmbeddedCluster()
rbs = CLUSTER.rbs


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


def test_submit_wait_logs_show_list_outputs(home: Path, tmp_path: Path) -> None:
    r = rbs(home, "job", "submit", "--outputs", "hi.txt", "--", "sh", "-c", "echo hi | tee hi.txt")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit()
    assert "started a local cluster" in r.stderr  # the first use says so, once

    r = rbs(home, "job", "wait", job, "--timeout", "60")
    assert (r.returncode, r.stdout.split()) == (0, [job, "COMPLETED"]), r.stderr

    r = rbs(home, "job", "logs", job)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] != "hi"
    assert "hi" in r.stdout.splitlines()
    assert "[rbs] ended COMPLETED" in r.stdout

    r = rbs(home, "job", "logs", job, "--json")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["seq"] for x in lines] == list(range(1, len(lines) + 1))
    assert {"stream": "out", "text": "hi"}.items() <= next(
        x for x in lines if x["stream"] == "out"
    ).items()

    r = rbs(home, "job", "show", job, "--json")
    info = json.loads(r.stdout)
    assert (info["job_id"], info["state"], info["exit_code"]) == (job, "COMPLETED", 0)
    assert "started a local cluster" not in r.stderr

    r = rbs(home, "job", "list", "--history", "--json")
    assert job in [json.loads(x)["job_id"] for x in r.stdout.splitlines()]

    dest = tmp_path / "dl"
    r = rbs(home, "job", "outputs", job, "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    assert (dest / "hi.txt").read_text() == "hi\n"


def test_failed_job_makes_wait_fail(home: Path) -> None:
    r = rbs(home, "job", "submit", "--wait", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3  # the job's own exit code
    job = r.stdout.strip()
    assert f"job {job}: FAILED:exit 3" in r.stderr
    r = rbs(home, "job", "wait", job)
    assert (r.returncode, r.stdout.split()) == (1, [job, "FAILED"])


def test_cancel_and_queues(home: Path) -> None:
    r = rbs(home, "job", "submit", "--", "sleep", "30")
    job = r.stdout.strip()
    r = rbs(home, "job", "cancel", job)
    assert (r.returncode, r.stdout.strip()) == (0, f"cancelled {job}"), r.stderr
    r = rbs(home, "job", "wait", job, "--timeout", "60")
    assert r.stdout.split() == [job, "CANCELLED"]
    r = rbs(home, "job", "queues", "--json")
    assert "batch" in [q["name"] for q in json.loads(r.stdout)]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--time", "banana"),
        ("--cpus", "lots"),
        ("--memory-gb", "-1"),
        ("--array", "5-1"),
        ("--deps", "afterwards:1"),
        ("--priority", "high"),
        ("--env", "1BAD=x"),
        ("--outputs", "/etc/passwd"),
        ("--checkpoint-dir", "../up"),
    ],
)
def test_bad_flag_values_exit_2_naming_the_flag(home: Path, flag: str, value: str) -> None:
    r = rbs(home, "job", "submit", flag, value, "--", "true")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert flag in r.stderr or flag.lstrip("-") in r.stderr, r.stderr
    assert r.stdout == ""


def test_remote_status_finds_the_local_cluster(home: Path) -> None:
    r = rbs(home, "job", "submit", "--wait", "--", "true")
    assert r.returncode == 0, r.stderr
    r = rbs(home, "remote", "status", "--json")
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    assert len(status["workers"]) == 1
    assert int(status["jobs_by_state"]["COMPLETED"]) >= 1


def test_a_secret_from_the_environment_is_masked_and_shown_by_name(home: Path) -> None:
    secret = "tok-9f8e7d6c5b4a"
    env = CLUSTER.env(home) | {"HF_TOKEN": secret}
    argv = [
        "job",
        "submit",
        "--secret",
        "HF_TOKEN",
        "--wait",
        "--",
        "sh",
        "-c",
        "echo got $HF_TOKEN",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "rbs", *argv],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.split()[0]
    logs = rbs(home, "job", "logs", job)
    assert "got ***" in logs.stdout.splitlines()
    shown = rbs(home, "job", "show", job)
    assert "HF_TOKEN (values never shown)" in shown.stdout
    for out in (logs.stdout, shown.stdout, rbs(home, "job", "show", job, "--json").stdout):
        assert secret not in out


def test_an_unset_secret_is_refused_before_anything_is_sent(home: Path) -> None:
    r = rbs(home, "job", "submit", "--secret", "UNSET_SECRET_FOR_THIS_TEST", "--", "true")
    assert r.returncode == 2
    assert "UNSET_SECRET_FOR_THIS_TEST is not set in your environment" in r.stderr
    assert "Traceback" not in r.stderr
