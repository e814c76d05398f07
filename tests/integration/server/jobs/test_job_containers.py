"""Container jobs and the cluster: refused at submit while no worker has a runtime, and a
worker's `--containers` setting is what it advertises in `rbs remote status`."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobs_harness import JobCluster

from rbs.client.errors import JobError


def test_a_container_job_is_refused_at_submit_naming_the_flag_when_no_worker_can(
    tmp_path: Path,
) -> None:
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1", containers="none")
        client = c.client()
        with pytest.raises(JobError) as err:
            client.submit(["true"], container="localhost/tools:1")
        text = str(err.value)
        assert "--container localhost/tools:1: no worker can run containers" in text
        assert client.submit(["true"]) == "1"  # the same cluster runs a plain job
        assert c.wait("1").state == "COMPLETED"
        (worker,) = client.status()["workers"]
        assert worker.get("container_runtimes", []) == []
    finally:
        c.stop()


def test_a_worker_given_an_engine_socket_advertises_docker(tmp_path: Path) -> None:
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1", containers="unix:///run/no-such/docker.sock")
        (worker,) = c.client().status()["workers"]
        assert worker["container_runtimes"] == ["docker"]
    finally:
        c.stop()
