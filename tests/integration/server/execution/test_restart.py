"""State that survives a server restart: operations in flight, their leases, the cache."""

from __future__ import annotations

import random
from pathlib import Path

import grpc
from exec_harness import Cluster
from google.rpc import code_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.wire.reapi_client import RemoteStore, connect


def _restartable_cluster(data_dir: Path) -> Cluster:
    """A cluster on a port below Linux's ephemeral range (32768+): a restart must bind
    the same port again, and a port in that range may meanwhile serve as some client
    socket's local port."""
    rng = random.Random()
    for _ in range(50):
        try:
            return Cluster(data_dir, port=rng.randrange(20000, 32000))
        except OSError:
            continue  # taken: try another
    raise RuntimeError("no free port in 20000-32000")


def test_operation_in_flight_survives_a_server_restart(tmp_path: Path) -> None:
    cluster = _restartable_cluster(tmp_path / "server")
    try:
        cluster.add_worker(tmp_path / "w1")
        cluster.wait_workers(1)
        runs = tmp_path / "runs"
        channel = connect(cluster.target)
        cas = RemoteStore(channel)
        digest = make_action(
            cas, ["/bin/sh", "-c", f"echo run >> {runs}; sleep 1.5; echo ok > out"], outputs=["out"]
        )
        req = re_pb2.ExecuteRequest(
            action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
            digest_function=re_pb2.DigestFunction.BLAKE3,
        )
        stub = re_grpc.ExecutionStub(channel)
        stream = stub.Execute(req, timeout=60)
        name = ""
        for op in stream:  # wait until a worker runs it
            name = op.name
            md = re_pb2.ExecuteOperationMetadata()
            op.metadata.Unpack(md)
            if md.stage == re_pb2.ExecutionStage.EXECUTING:
                break
        stream.cancel()
        cluster.restart_server()
        # The restarted server knows the operation; the worker reconnects holding the
        # lease and reports the result; the action is not run a second time.
        channel.close()
        # A new connection of its own: channels otherwise share the old subchannel,
        # which may still be backing off from the refused connects during the restart.
        channel = grpc.insecure_channel(
            f"127.0.0.1:{cluster.port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        stub = re_grpc.ExecutionStub(channel)
        ops = list(
            stub.WaitExecution(
                re_pb2.WaitExecutionRequest(name=name), timeout=60, wait_for_ready=True
            )
        )
        resp = re_pb2.ExecuteResponse()
        assert ops[-1].done and ops[-1].response.Unpack(resp)
        assert resp.status.code == code_pb2.OK, resp.status.message
        assert runs.read_text() == "run\n"
        # The result was cached before the restart's second half: a new Execute hits it.
        again = list(stub.Execute(req, timeout=30))
        cached = re_pb2.ExecuteResponse()
        again[-1].response.Unpack(cached)
        assert cached.cached_result
        channel.close()
    finally:
        cluster.stop()


def test_worker_without_the_token_is_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("sekret\n")
    cluster = Cluster(tmp_path / "server", token_file=token_file)
    try:
        from rbs.executor.worker import WorkerError

        cluster.add_worker(tmp_path / "bad", token=None)
        _, fut = cluster.workers[-1]
        err = cluster.call(_result(fut))
        assert isinstance(err, WorkerError) and "UNAUTHENTICATED" in str(err)
        cluster.workers.pop()
        cluster.add_worker(tmp_path / "good", token="sekret")
        cluster.wait_workers(1)
        status = grpc.insecure_channel(f"127.0.0.1:{cluster.port}")
        status.close()
    finally:
        cluster.stop()


async def _result(fut: object) -> BaseException | None:
    import asyncio

    assert isinstance(fut, asyncio.Future)
    try:
        await asyncio.wait_for(fut, 20)
    except BaseException as e:
        return e
    return None
