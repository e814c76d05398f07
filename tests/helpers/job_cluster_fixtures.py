"""The `cluster` and `client` fixtures that job tests share: a cluster server with one
in-process worker (`jobs_harness.JobCluster`), stopped after the test. A conftest or
test module imports them by name; pytest finds fixtures in its namespace. A fixture
that needs something first (an environment variable) uses `one_worker_cluster`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_harness import JobCluster

from rbs.client.jobs import JobsClient


@contextlib.contextmanager
def one_worker_cluster(tmp_path: Path) -> Iterator[JobCluster]:
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1")
        yield c
    finally:
        c.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JobCluster]:
    with one_worker_cluster(tmp_path) as c:
        yield c


@pytest.fixture
def client(cluster: JobCluster) -> JobsClient:
    return cluster.client()
