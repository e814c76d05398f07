"""Hostile gRPC clients get a precise status, and the server keeps serving the others.

A message over the server's limit (`[cas] max_batch_size` + headroom) is refused with
RESOURCE_EXHAUSTED before it reaches a servicer; call headers over `[grpc]
max_metadata_size` are refused too; a normal client is served meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from jobs_harness import JobCluster

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import digest_to_pb
from rbs.model import Digest
from rbs.server.config import Config
from rbs.server.edge_config import GrpcConfig
from rbs.wire.reapi_client import RemoteStore, connect

LIMITS = GrpcConfig(max_metadata_size=8 << 10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JobCluster]:
    c = JobCluster(tmp_path / "server", serve=False)
    c.config = Config(server=c.config.server, jobs=c.config.jobs, grpc=LIMITS)
    c.start_server()
    try:
        yield c
    finally:
        c.stop()


def unlimited(address: str) -> grpc.Channel:
    """A client channel that sends anything: the server alone must hold the limits."""
    return grpc.insecure_channel(
        address,
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )


def served(address: str) -> bool:
    """A normal client's round trip: store a blob, find it."""
    channel = connect(address)
    try:
        store = RemoteStore(channel)
        d = store.put(b"still serving")
        return store.contains(d)
    finally:
        channel.close()


def test_a_message_over_the_limit_is_resource_exhausted(cluster: JobCluster) -> None:
    limit = cluster.config.cas.max_message_size
    data = b"x" * (limit + 1024)
    req = re_pb2.BatchUpdateBlobsRequest()
    req.requests.add(digest=digest_to_pb(Digest.of(data)), data=data)
    with unlimited(cluster.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            re_grpc.ContentAddressableStorageStub(ch).BatchUpdateBlobs(req, timeout=60)
        assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert served(cluster.address)
        # The same connection carries a normal call afterwards.
        ok = re_grpc.ContentAddressableStorageStub(ch).FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(), timeout=60
        )
        assert list(ok.missing_blob_digests) == []


def test_call_headers_over_the_limit_are_refused(cluster: JobCluster) -> None:
    with unlimited(cluster.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            re_grpc.ContentAddressableStorageStub(ch).FindMissingBlobs(
                re_pb2.FindMissingBlobsRequest(),
                metadata=[("x-padding", "p" * (LIMITS.max_metadata_size * 2))],
                timeout=60,
            )
        assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert "metadata size" in e.value.details()  # type: ignore[attr-defined]
    assert served(cluster.address)


def test_more_calls_than_the_stream_limit_are_served_or_refused_as_unavailable(
    cluster: JobCluster,
) -> None:
    # More calls at once than max_concurrent_streams on one connection: each one is
    # either served or refused (REFUSED_STREAM, seen as UNAVAILABLE), none hangs, and
    # the server goes on serving.
    n = LIMITS.max_concurrent_streams + 50
    with unlimited(cluster.address) as ch:
        stub = re_grpc.ContentAddressableStorageStub(ch)
        futures = [
            stub.FindMissingBlobs.future(re_pb2.FindMissingBlobsRequest(), timeout=120)
            for _ in range(n)
        ]
        outcomes = []
        for f in futures:
            try:
                outcomes.append("ok" if list(f.result().missing_blob_digests) == [] else "bad")
            except grpc.RpcError as e:
                outcomes.append(e.code().name)  # type: ignore[attr-defined]
    assert set(outcomes) <= {"ok", "UNAVAILABLE"}, set(outcomes)
    assert outcomes.count("ok") >= LIMITS.max_concurrent_streams
    assert served(cluster.address)
