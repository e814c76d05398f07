"""Fixtures for job-target tests: workspaces with job targets, and an in-process cluster."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The cluster harness of the job tests (a server and in-process workers on one loop).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "jobs"))

from jobs_harness import JobCluster

from rbs.jobs.client import JobsClient


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
