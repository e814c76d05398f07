"""Staging asks for missing blobs in batches that fit the server's JSON body limit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_harness import JobCluster

from rbs.client import staging
from rbs.client.http import HttpConnection
from rbs.model import Digest


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JobCluster]:
    c = JobCluster(tmp_path / "server")
    try:
        yield c
    finally:
        c.stop()


def test_more_digests_than_one_request_takes(
    cluster: JobCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = HttpConnection("127.0.0.1", cluster.port + 1)
    try:
        stored = [
            staging.upload(conn, {Digest.of(b"kept %d" % i): b"kept %d" % i}) for i in range(3)
        ]
        assert stored == [len(b"kept 0")] * 3
        # 20,000 digests are ~1.5 MiB of JSON: more than one request may carry.
        wanted = [Digest.of(b"kept %d" % i) for i in range(3)]
        wanted += [Digest.of(b"absent %d" % i) for i in range(20_000)]
        missing = staging.find_missing(conn, wanted)
        assert len(missing) == 20_000
        assert set(missing) == set(wanted[3:])
    finally:
        conn.close()


def test_no_digests_no_request(cluster: JobCluster) -> None:
    conn = HttpConnection("127.0.0.1", 1)  # nothing listens: a request would fail
    assert staging.find_missing(conn, []) == []
