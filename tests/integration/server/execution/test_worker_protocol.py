"""The Workers protocol spoken by a hand-driven fake worker: registration rules and bad results."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from exec_harness import Cluster
from google.rpc import code_pb2, status_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.model import Digest
from rbs.wire.reapi_client import ActionCacheClient, RemoteStore, connect
from rbs.wire.workers import WORKERS_PROTOCOL


class FakeWorker:
    """A Connect stream driven by the test: `send` messages, `recv` the server's."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._out: queue.Queue[w_pb2.WorkerMessage | None] = queue.Queue()
        self._stream = w_grpc.WorkersStub(channel).Connect(self._requests(), timeout=60)

    def _requests(self) -> Iterator[w_pb2.WorkerMessage]:
        while (msg := self._out.get()) is not None:
            yield msg

    def send(self, msg: w_pb2.WorkerMessage) -> None:
        self._out.put(msg)

    def recv(self) -> w_pb2.ServerMessage:
        return next(self._stream)

    def close(self) -> None:
        self._out.put(None)
        self._stream.cancel()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "server")  # no real workers
    yield c
    c.stop()


def test_first_message_must_be_register(server: Cluster) -> None:
    channel = connect(server.target)
    fake = FakeWorker(channel)
    fake.send(w_pb2.WorkerMessage(heartbeat=w_pb2.Heartbeat()))
    with pytest.raises(grpc.RpcError) as e:
        fake.recv()
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Register" in (e.value.details() or "")
    fake.close()
    channel.close()


def test_result_naming_missing_outputs_is_internal_and_not_cached(server: Cluster) -> None:
    channel = connect(server.target)
    cas = RemoteStore(channel)
    digest = make_action(cas, ["/bin/true"], outputs=["out"])
    fake = FakeWorker(channel)
    fake.send(
        w_pb2.WorkerMessage(
            register=w_pb2.Register(
                worker_id="fake",
                hostname="h",
                build_slots=1,
                cpus=1,
                protocol_version=WORKERS_PROTOCOL,
            )
        )
    )
    assert fake.recv().HasField("registered")
    results: list[re_pb2.ExecuteResponse] = []

    def call() -> None:
        req = re_pb2.ExecuteRequest(
            action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
            digest_function=re_pb2.DigestFunction.BLAKE3,
        )
        ops = list(re_grpc.ExecutionStub(channel).Execute(req, timeout=60))
        resp = re_pb2.ExecuteResponse()
        ops[-1].response.Unpack(resp)
        results.append(resp)

    caller = threading.Thread(target=call)
    caller.start()
    lease = fake.recv().action_lease
    assert lease.action_digest.hash == digest.hash and lease.attempt == 1
    ghost = Digest.of(b"never uploaded")
    result = re_pb2.ActionResult(exit_code=0)
    result.output_files.add(
        path="out", digest=re_pb2.Digest(hash=ghost.hash, size_bytes=ghost.size)
    )
    fake.send(
        w_pb2.WorkerMessage(
            action_finished=w_pb2.ActionFinished(
                lease_id=lease.lease_id, status=status_pb2.Status(code=0), result=result
            )
        )
    )
    caller.join(30)
    (resp,) = results
    assert resp.status.code == code_pb2.INTERNAL
    assert "not in the CAS" in resp.status.message
    # Nothing was cached: the action cache has no entry for it.
    assert ActionCacheClient(channel).get(digest) is None
    fake.close()
    channel.close()
