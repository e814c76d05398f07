"""The jobs client reaches a server by a numeric address and by a host name alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from job_cluster_fixtures import cluster
from jobs_harness import JobCluster

from rbs.client.jobs import JobsClient

__all__ = ["cluster"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_submit_wait_and_logs_by_address_or_name(
    cluster: JobCluster, tmp_path: Path, host: str
) -> None:
    # A name goes through getaddrinfo and socket.create_connection, a numeric address
    # through _socket; staging a file uploads it with sendfile on either.
    (tmp_path / "in.txt").write_text("staged\n")
    with JobsClient(f"{host}:{cluster.port}") as client:
        job = client.submit(["cat", "in.txt"], inputs=[str(tmp_path / "in.txt")])
        info = client.wait(job, timeout=60)
        assert info.state == "COMPLETED", info.raw
        assert [x.text for x in client.logs(job) if x.stream == "out"] == ["staged"]
