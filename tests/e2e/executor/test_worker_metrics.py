"""`rbs remote worker --metrics-port`: the worker's own /metrics, on 127.0.0.1 by default."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from jobs_harness import JobCluster, spawn_rbs, stop_process, wait_for, wait_ready
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.timeout(300)


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_worker_serves_its_slots_and_connection(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server")
    ready, log = tmp_path / "w.ready", tmp_path / "w.log"
    args = ["remote", "worker", "--server", cluster.address, "--work-dir", str(tmp_path / "w")]
    args += ["--job-slots", "3", "--cpus", "2", "--ready-file", str(ready), "--metrics-port", "0"]
    proc = spawn_rbs(args, log)
    try:
        doc = wait_ready(proc, ready, log)
        port = int(str(doc["metrics_port"]))
        m = _scrape(port)
        assert m[("rbs_worker_connected", ())] == 1
        assert m[("rbs_worker_job_slots", (("state", "free"),))] == 3
        assert m[("rbs_worker_job_slots", (("state", "used"),))] == 0
        assert m[("rbs_worker_cpus", ())] == 2
        client = cluster.client()
        gate = tmp_path / "gate"
        job = client.submit(["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])
        wait_for(
            "the worker to count the job's slot",
            lambda: _scrape(port)[("rbs_worker_job_slots", (("state", "used"),))] == 1,
            timeout=120,
        )
        gate.touch()
        assert cluster.wait(job, timeout=120).state == "COMPLETED"
        assert f"metrics at http://127.0.0.1:{port}/metrics" in log.read_text()
    finally:
        stop_process(proc)
        cluster.stop()


def test_a_taken_metrics_port_fails_in_one_line_naming_the_flag(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server")
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            args = ["remote", "worker", "--server", cluster.address, "--work-dir", str(tmp_path)]
            r = subprocess.run(
                [sys.executable, "-m", "rbs", *args, "--metrics-port", str(port)],
                capture_output=True,
                text=True,
                timeout=120,
            )
        assert r.returncode == 1
        assert f"--metrics-port: cannot listen on 127.0.0.1:{port}" in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        cluster.stop()
