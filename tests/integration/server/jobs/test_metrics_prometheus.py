"""A real Prometheus (Debian's /usr/bin/prometheus) scrapes a running cluster with a token.

`make system-deps` installs the package (`--no-install-recommends`; its service is never
started). Here Prometheus runs as a child process on 127.0.0.1 with its own config and
storage under the test's folder; without the binary the tests skip, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobs_harness import FAST_JOBS, JobCluster, stop_process, wait_for

from rbs.client.jobs import JobsClient
from rbs.executor.worker import Worker, WorkerConfig
from rbs.server.cluster import start_cluster
from rbs.server.tokens import add_token

PROMETHEUS = Path("/usr/bin/prometheus")
DASHBOARD = Path(__file__).parents[4] / "docs" / "grafana-dashboard.json"
pytestmark = pytest.mark.timeout(300)


class TokenCluster(JobCluster):
    """A JobCluster whose server reads a tokens file; its one worker presents a token."""

    def __init__(self, data_dir: Path, tokens: Path) -> None:
        super().__init__(data_dir, serve=False)
        server = dataclasses.replace(self.config.server, tokens_file=tokens)
        self.config = dataclasses.replace(self.config, server=server, jobs=FAST_JOBS)
        self.server = self.call(start_cluster(self.config))
        server = dataclasses.replace(server, port=self.server.port)
        self.config = dataclasses.replace(self.config, server=server)
        self.admin = ""

    def token_worker(self, work_dir: Path, token: str) -> None:
        async def make() -> Worker:
            config = WorkerConfig(
                server=self.address,
                work_dir=work_dir,
                cpus=2,
                memory_bytes=2 << 30,
                build_slots=1,
                job_slots=2,
                reconnect_timeout_s=60,
                token=token,
            )
            w = Worker(config)
            self.workers.append((w, asyncio.ensure_future(w.run())))
            return w

        worker = self.call(make())
        wait_for(f"worker {worker.worker_id} to register", worker.connected.is_set)

    def client(self) -> JobsClient:
        c = JobsClient(self.address, token=self.admin)
        self._clients.append(c)
        return c


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "tokens.toml"
    return {
        name: add_token(path, name, role)
        for name, role in (("alice", "user"), ("root", "admin"), ("w1", "worker"))
    }


@pytest.fixture
def cluster(tmp_path: Path, tokens: dict[str, str]) -> Iterator[TokenCluster]:
    c = TokenCluster(tmp_path / "server", tmp_path / "tokens.toml")
    c.admin = tokens["root"]
    try:
        c.token_worker(tmp_path / "w1", tokens["w1"])
        yield c
    finally:
        c.stop()


def _status(port: int, token: str | None) -> int:
    r = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        r.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(r, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_metrics_take_an_admin_or_worker_token(
    cluster: TokenCluster, tokens: dict[str, str]
) -> None:
    port = cluster.port + 1
    assert _status(port, None) == 401
    assert _status(port, "rbs_not-a-token") == 401
    assert _status(port, tokens["alice"]) == 403
    assert _status(port, tokens["root"]) == 200
    assert _status(port, tokens["w1"]) == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=30) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def _ready(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/-/ready"
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
        return int(resp.status) == 200
    return False


@pytest.mark.skipif(
    not os.access(PROMETHEUS, os.X_OK),
    reason="Debian's prometheus is not installed (make system-deps installs it: "
    "apt-get install --no-install-recommends prometheus)",
)
def test_prometheus_scrapes_the_cluster_and_answers_promql(
    cluster: TokenCluster, tokens: dict[str, str], tmp_path: Path
) -> None:
    client = cluster.client()
    job = client.submit(["sh", "-c", "exit 0"])
    assert cluster.wait(job).state == "COMPLETED"
    failed = client.submit(["sh", "-c", "exit 7"])
    assert cluster.wait(failed).state == "FAILED"

    token_file = tmp_path / "prom" / "token"
    token_file.parent.mkdir()
    token_file.write_text(tokens["w1"])
    config = tmp_path / "prom" / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: rbs\n"
        "    metrics_path: /metrics\n"
        "    authorization:\n"
        "      type: Bearer\n"
        f"      credentials_file: {token_file}\n"
        "    static_configs:\n"
        f"      - targets: ['127.0.0.1:{cluster.port + 1}']\n"
    )
    port = _free_port()
    log = tmp_path / "prom" / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                f"--web.listen-address=127.0.0.1:{port}",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'prom' / 'tsdb'}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {proc.returncode}:\n{log.read_text()}")
            return _ready(port)

        wait_for("prometheus to be ready", ready, timeout=120)
        # The first scrape lands within a few intervals; a loaded machine gets a long bound.
        up = wait_for(
            "prometheus's first scrape of the cluster",
            lambda: _query(port, 'up{job="rbs"} == 1'),
            timeout=120,
        )
        assert up[0]["metric"]["instance"] == f"127.0.0.1:{cluster.port + 1}"
        done = _query(port, 'rbs_jobs{state="COMPLETED"}')
        assert [float(r["value"][1]) for r in done] == [1.0]
        by_state = _query(port, 'sum by (state) (rbs_jobs{state=~"COMPLETED|FAILED"})')
        assert {r["metric"]["state"]: float(r["value"][1]) for r in by_state} == {
            "COMPLETED": 1.0,
            "FAILED": 1.0,
        }
        runs = _query(port, "rbs_job_run_seconds_count")
        assert [float(r["value"][1]) for r in runs] == [2.0]
        slots = _query(port, 'rbs_job_slots{state="free"}')
        assert [float(r["value"][1]) for r in slots] == [2.0]
        # Every query of the example Grafana dashboard parses and runs (status success).
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                _query(port, target["expr"])
        assert _query(port, "rbs_queue_jobs"), "the dashboard's queue panel has no series"
    finally:
        stop_process(proc)
