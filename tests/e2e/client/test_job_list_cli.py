"""`rbs job list` pages: 100 rows and the total by default, --all for every one, filters, sorts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from rbs.client.jobs import JobsClient

JOBS = 150
RBS = (sys.executable, "-m", "rbs")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with no worker, so every job stays PENDING; 150 jobs, every 10th named big-N."""
    tmp = tmp_path_factory.mktemp("list")
    ready = tmp / "server.ready"
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 (closed below)
    serve = ["remote", "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    proc = subprocess.Popen(
        [*RBS, *serve, "--ready-file", str(ready)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while not ready.exists():
            assert proc.poll() is None, (tmp / "server.log").read_text()
            assert time.monotonic() < deadline, "the server did not get ready in 90 s"
            time.sleep(0.05)
        port = json.loads(ready.read_text())["port"]
        address = f"127.0.0.1:{port}"
        with JobsClient(address) as client:
            for i in range(JOBS):
                name = f"big-{i}" if i % 10 == 0 else f"small-{i}"
                client.submit(["true"], name=name, priority=str(i % 7))
        yield address
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def rbs(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RBS_REMOTE_TOKEN"}
    return subprocess.run(
        [sys.executable, "-m", "rbs", "job", "list", "--server", address, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _ids(stdout: str) -> list[int]:
    """The ID column of a table (the header and the closing note are not rows)."""
    return [
        int(line.split()[0])
        for line in stdout.splitlines()
        if line[:1].isdigit() and " jobs; " not in line
    ]


def test_list_shows_100_rows_and_says_how_many_there_are(server: str) -> None:
    r = rbs(server)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "QUEUE", "STATE"]
    assert _ids(r.stdout) == list(range(1, 101))
    assert lines[-1] == "100 of 150 jobs; --all to see every one"
    # Columns line up: every row's STATE starts where the header's does.
    col = lines[0].index("STATE")
    assert all(line[col:].startswith("PENDING") for line in lines[1:-1])


def test_all_pages_through_every_job(server: str) -> None:
    r = rbs(server, "--all")
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == list(range(1, JOBS + 1))
    assert "--all to see" not in r.stdout


def test_limit_sort_order_and_name_filter(server: str) -> None:
    r = rbs(server, "--limit", "5", "--order", "desc")
    assert _ids(r.stdout) == [150, 149, 148, 147, 146]
    assert r.stdout.splitlines()[-1] == "5 of 150 jobs; --all to see every one"
    r = rbs(server, "--name", "big-*")
    assert _ids(r.stdout) == list(range(1, JOBS + 1, 10))
    assert "of" not in r.stdout.splitlines()[-1]  # all 15 shown: no note
    r = rbs(server, "--sort", "priority", "--limit", "30")
    prio = r.stdout.splitlines()[0].index("PRIO")
    values = [int(line[prio:].split()[0]) for line in r.stdout.splitlines()[1:-1]]
    assert values == sorted(values, reverse=True) and values[0] >= 6  # 6 + any age bonus


def test_json_prints_the_page_and_notes_the_rest_on_stderr(server: str) -> None:
    r = rbs(server, "--json", "--limit", "10")
    docs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [d["job_id"] for d in docs] == [str(i) for i in range(1, 11)]
    assert "10 of 150 jobs" in r.stderr


def test_bad_flags_are_named_without_a_traceback(server: str) -> None:
    r = rbs(server, "--all", "--limit", "5")
    assert r.returncode == 2 and "--all and --limit" in r.stderr
    r = rbs(server, "--state", "DONE")
    assert r.returncode != 0 and "--state DONE: unknown state" in r.stderr
    r = rbs(server, "--limit", "0")
    assert r.returncode == 2 and "--limit" in r.stderr
    for res in (r,):
        assert "Traceback" not in res.stderr
    r = rbs(server, "--user", "nobody")
    assert (r.returncode, r.stdout.strip()) == (0, "no jobs")
