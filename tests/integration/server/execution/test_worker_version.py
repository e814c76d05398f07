"""The Workers protocol version: a Register of another version is refused, and the worker gives up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from exec_harness import Cluster

from rbs import __version__
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.executor.worker import Worker, WorkerConfig, WorkerError
from rbs.wire.reapi_client import connect
from rbs.wire.workers import WORKERS_PROTOCOL


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "server")  # no workers of its own
    yield c
    c.stop()


def _register(server: Cluster, version: int) -> w_pb2.ServerMessage:
    """Open a Connect stream, send one Register, and read the server's first answer."""
    channel = connect(server.target)
    register = w_pb2.Register(
        worker_id="old-1",
        name="old",
        hostname="h",
        cpus=1,
        build_slots=1,
        version="0.0.1",
        protocol_version=version,
    )
    call = w_grpc.WorkersStub(channel).Connect(
        iter([w_pb2.WorkerMessage(register=register)]), timeout=30
    )
    try:
        return next(call)
    finally:
        call.cancel()
        channel.close()


@pytest.mark.parametrize("version", [0, 1, WORKERS_PROTOCOL - 1, WORKERS_PROTOCOL + 1])
def test_a_register_of_another_protocol_is_failed_precondition(
    server: Cluster, version: int
) -> None:
    with pytest.raises(grpc.RpcError) as e:
        _register(server, version)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    speaks = max(version, 1)
    details = e.value.details() or ""
    assert details.startswith(f"worker old speaks Workers protocol {speaks}"), details
    assert details.endswith(
        f"but this server speaks {WORKERS_PROTOCOL}: run the same rbs version on workers "
        f"and server (worker rbs 0.0.1, server rbs {__version__})"
    ), details
    assert server.call(_known_workers(server)) == 0  # refused before it was attached


def test_a_register_of_this_protocol_is_registered(server: Cluster) -> None:
    assert _register(server, WORKERS_PROTOCOL).HasField("registered")


async def _known_workers(server: Cluster) -> int:
    return len(server.hub.status().workers)


def test_the_worker_daemon_gives_up_with_the_servers_message(
    server: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rbs.executor.worker.WORKERS_PROTOCOL", 1)

    async def run() -> None:
        w = Worker(
            WorkerConfig(
                server=server.target,
                work_dir=tmp_path / "w",
                build_slots=1,
                job_slots=0,
                reconnect_timeout_s=60,
            )
        )
        await asyncio.wait_for(w.run(), 20)

    with pytest.raises(WorkerError) as e:
        server.call(run())
    text = str(e.value)
    assert "refused this worker: FAILED_PRECONDITION: worker" in text
    assert f"speaks Workers protocol 1 but this server speaks {WORKERS_PROTOCOL}" in text


def test_rbs_remote_worker_exits_non_zero_printing_the_message(
    server: Cluster, tmp_path: Path
) -> None:
    # A worker of another protocol, as an older rbs would be: the constant patched in a
    # fresh process, then the real command line.
    code = (
        "import sys, rbs.executor.worker as w; w.WORKERS_PROTOCOL = 1; "
        "from rbs.cli.main import main; sys.argv[0] = 'rbs'; main()"
    )
    args = ["remote", "worker", "--server", server.target, "--work-dir", str(tmp_path / "w")]
    args += ["--build-slots", "1", "--job-slots", "0", "--reconnect-timeout", "60"]
    r = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 1, r.stderr
    assert "refused this worker: FAILED_PRECONDITION" in r.stderr
    assert (
        f"speaks Workers protocol 1 but this server speaks {WORKERS_PROTOCOL}: "
        "run the same rbs version on workers and server" in r.stderr
    )
