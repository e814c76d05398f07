"""Telemetry of a running job: sampled by the worker, stored by the server, read back by
`rbs job telemetry` and the last sample by `rbs job show`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from job_cluster_fixtures import one_worker_cluster
from jobs_harness import JobCluster, wait_for

from rbs.cli.job import job as job_cli
from rbs.client.jobs import JobsClient

ALLOC = 64 << 20
BURN = (
    "import os, sys\n"
    f"data = bytearray(b'x') * {ALLOC}\n"
    "print('allocated', flush=True)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    sum(range(20000))\n"
    "print(len(data))\n"
)


@pytest.fixture
def fast_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobCluster]:
    # The worker's supervisor (a child process) reads the interval from its environment.
    monkeypatch.setenv("RBS_TELEMETRY_INTERVAL", "0.5")
    with one_worker_cluster(tmp_path) as c:
        yield c


def _busy(samples: list[dict[str, Any]], least: int = 1) -> list[dict[str, Any]]:
    """The samples of a busy job past its allocation; none unless there are `least`."""
    busy = [s for s in samples if s.get("cpu", 0) > 0 and s.get("mem_peak", 0) >= ALLOC]
    return busy if len(busy) >= least else []


def test_a_busy_job_has_cpu_and_memory_samples_and_show_prints_the_latest(
    fast_cluster: JobCluster, tmp_path: Path
) -> None:
    client: JobsClient = fast_cluster.client()
    stop = tmp_path / "stop"
    job = client.submit(["python3", "-c", BURN, str(stop)])
    try:
        wait_for(
            "the job to allocate", lambda: any(x.text == "allocated" for x in client.logs(job))
        )
        busy = wait_for("two busy samples", lambda: _busy(client.telemetry(job), 2), timeout=120)
    finally:
        stop.touch()
    info = fast_cluster.wait(job)
    assert info.state == "COMPLETED"
    sample = busy[-1]
    assert sample.get("mem", 0) > 0 and sample["cpu_s"] > 0, sample
    assert "gpus" not in sample  # no NVML here (and no GPU pinned)
    # Samples never show as log lines.
    assert not any("telemetry" in x.text for x in client.logs(job))

    runner = CliRunner()
    server = ["--server", fast_cluster.address]
    out = runner.invoke(job_cli, ["telemetry", *server, job])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]  # not a tty: JSON lines
    assert rows == client.telemetry(job) and _busy(rows)
    one = runner.invoke(job_cli, ["telemetry", *server, "--points", "1", job])
    (avg,) = [json.loads(line) for line in one.output.splitlines()]
    assert avg["samples"] == len(rows) >= 2

    latest = client.telemetry(job, last=True)[-1]
    shown = runner.invoke(job_cli, ["show", *server, job])
    assert shown.exit_code == 0, shown.output
    (line,) = [ln for ln in shown.output.splitlines() if ln.startswith("Telemetry")]
    assert f"cpu {latest['cpu']:.2f} cores" in line and "mem " in line and "peak" in line


def test_telemetry_of_an_unknown_job_and_a_bad_since_say_so(fast_cluster: JobCluster) -> None:
    runner = CliRunner()
    server = ["--server", fast_cluster.address]
    out = runner.invoke(job_cli, ["telemetry", *server, "99999"])
    assert out.exit_code == 2 and "rbs job telemetry: error:" in out.output
    out = runner.invoke(job_cli, ["telemetry", *server, "--since", "soon", "1"])
    assert out.exit_code == 2 and "--since" in out.output
