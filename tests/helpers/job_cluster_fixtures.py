"""The `cluster` and `client` fixtures that job tests share: a cluster server with one
in-process worker (`jobs_harness.JobCluster`), stopped after the test. A conftest or
test module imports them by name; pytest finds fixtures in its namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_harness import JobCluster

from rbs.client.jobs import JobsClient


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JobCluster]:
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1")
        yield c
    finally:
        c.stop()


@pytest.fixture
def client(cluster: JobCluster) -> JobsClient:
    return cluster.client()
