"""TLS on both ports: a self-signed certificate made here, trusted by the clients with --tls-ca.

The jobs API (HTTP) and gRPC (the CAS, the Workers stream) are served over TLS from one
certificate and key; a worker and a jobs client that trust it run a job end to end,
and a client speaking plaintext to the TLS server gets an error, never an answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from jobs_harness import JobCluster
from tls_certs import self_signed

from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient
from rbs.server.config import Config
from rbs.wire.reapi_client import TLS_CA_ENV, RemoteError, RemoteStore, connect


@pytest.fixture
def certs(tmp_path: Path) -> tuple[Path, Path]:
    return self_signed(tmp_path)


@pytest.fixture
def cluster(
    tmp_path: Path, certs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[JobCluster]:
    monkeypatch.delenv(TLS_CA_ENV, raising=False)
    c = JobCluster(tmp_path / "server", serve=False)
    tls = dataclasses.replace(c.config.server, tls_cert=certs[0], tls_key=certs[1])
    c.config = Config(server=tls, jobs=c.config.jobs)
    c.start_server()
    try:
        yield c
    finally:
        c.stop()


def test_a_worker_and_a_jobs_client_that_trust_the_certificate_run_a_job(
    cluster: JobCluster, certs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TLS_CA_ENV, str(certs[0]))  # what --tls-ca FILE sets
    cluster.add_worker(cluster.data_dir.parent / "w1")  # its Workers stream over TLS
    inputs = cluster.data_dir.parent / "inputs"
    inputs.mkdir()
    (inputs / "big.bin").write_bytes(bytes(range(256)) * 8192)  # 2 MiB: PUT by sendfile
    (inputs / "small.txt").write_text("small\n")  # in a batch
    with JobsClient(cluster.address) as client:
        job = client.submit(
            ["sh", "-c", "echo over-tls; wc -c < big.bin; cat small.txt"],
            inputs=["big.bin", "small.txt"],
            cwd=inputs,
        )
        info = client.wait(job, timeout=120)
        assert info.state == "COMPLETED"
        out = [ln.text.strip() for ln in client.logs(job) if ln.stream == "out"]
        assert out == ["over-tls", str(256 * 8192), "small"]


def test_grpc_over_tls_stores_and_reads_a_blob(
    cluster: JobCluster, certs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TLS_CA_ENV, str(certs[0]))
    channel = connect(cluster.address)
    try:
        store = RemoteStore(channel)
        d = store.put(b"hello over tls")
        assert store.get(d) == b"hello over tls"
    finally:
        channel.close()


def test_a_plaintext_jobs_client_gets_an_error_not_an_answer(cluster: JobCluster) -> None:
    with JobsClient(cluster.address) as client, pytest.raises(JobError) as e:
        client.queues()
    assert f"127.0.0.1:{cluster.port + 1}" in str(e.value)


def test_a_client_that_does_not_trust_the_certificate_is_refused(
    cluster: JobCluster, tmp_path: Path
) -> None:
    other, _ = self_signed(tmp_path, "other")
    with JobsClient(cluster.address, tls_ca=str(other)) as client, pytest.raises(JobError) as e:
        client.queues()
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value) or "certificate" in str(e.value)


def test_plaintext_grpc_to_the_tls_server_is_unavailable(cluster: JobCluster) -> None:
    channel = connect(cluster.address)
    try:
        with pytest.raises(RemoteError) as e:
            RemoteStore(channel).put(b"clear text")
        assert e.value.code is grpc.StatusCode.UNAVAILABLE
    finally:
        channel.close()
