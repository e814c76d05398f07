"""Fixtures for the execution integration tests: a server with workers, and clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from exec_harness import Cluster

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.wire.reapi_client import RemoteStore, connect


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "server")
    c.add_worker(tmp_path / "w1")
    c.wait_workers(1)
    yield c
    c.stop()


@pytest.fixture
def channel(cluster: Cluster) -> Iterator[grpc.Channel]:
    ch = connect(cluster.target)
    yield ch
    ch.close()


@pytest.fixture
def cas(channel: grpc.Channel) -> RemoteStore:
    return RemoteStore(channel)


@pytest.fixture
def execution(channel: grpc.Channel) -> re_grpc.ExecutionStub:
    return re_grpc.ExecutionStub(channel)
