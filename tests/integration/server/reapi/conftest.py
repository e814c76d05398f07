"""Fixtures for the remote integration tests (the harness is in remote_harness.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from remote_harness import ServerThread, StartServer, make_config

from rbs.wire.reapi_client import connect


@pytest.fixture
def start(tmp_path: Path) -> Iterator[StartServer]:
    """`start(**server_config)` -> a running ServerThread; all are stopped at teardown."""
    servers: list[ServerThread] = []

    def _start(data_dir: Path | None = None, **server: object) -> ServerThread:
        config = make_config(data_dir or tmp_path / "data", **server)
        srv = ServerThread(config).start()
        servers.append(srv)
        return srv

    yield _start
    for srv in servers:
        srv.stop()


@pytest.fixture
def server(start: StartServer) -> ServerThread:
    return start()


@pytest.fixture
def channel(server: ServerThread) -> Iterator[grpc.Channel]:
    ch = connect(server.target)
    yield ch
    ch.close()
