"""Execute / WaitExecution end to end in one process: server, worker, REAPI client."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import grpc
import pytest
from exec_harness import Cluster
from google.longrunning import operations_pb2
from google.rpc import code_pb2, error_details_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.cas.memory import MemoryStore
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteStore

DF = re_pb2.DigestFunction


def execute(
    stub: re_grpc.ExecutionStub, digest: Digest, **kw: object
) -> tuple[list[operations_pb2.Operation], re_pb2.ExecuteResponse]:
    fn = DF.BLAKE3 if digest.function is DigestFunction.BLAKE3 else DF.SHA256
    req = re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
        digest_function=fn,
        **kw,  # type: ignore[arg-type]
    )
    ops = list(stub.Execute(req, timeout=60))
    return ops, _response(ops[-1])


def _response(op: operations_pb2.Operation) -> re_pb2.ExecuteResponse:
    assert op.done and not op.HasField("error")
    resp = re_pb2.ExecuteResponse()
    assert op.response.Unpack(resp)
    return resp


def _stages(ops: list[operations_pb2.Operation]) -> list[int]:
    out = []
    for op in ops:
        md = re_pb2.ExecuteOperationMetadata()
        assert op.metadata.Unpack(md)
        out.append(md.stage)
    return out


def _blob(cas: RemoteStore, d: re_pb2.Digest) -> bytes:
    return cas.get(Digest(function=DigestFunction.BLAKE3, hash=d.hash, size=d.size_bytes))


def test_execute_runs_remotely_then_hits_the_cache(
    cas: RemoteStore, execution: re_grpc.ExecutionStub
) -> None:
    digest = make_action(
        cas,
        ["/bin/sh", "-c", "tr a-z A-Z < in.txt > out.txt; echo done"],
        inputs={"in.txt": b"hello\n"},
        outputs=["out.txt"],
    )
    ops, resp = execute(execution, digest)
    assert resp.status.code == code_pb2.OK, resp.status.message
    assert not resp.cached_result
    assert _stages(ops)[-1] == re_pb2.ExecutionStage.COMPLETED
    assert re_pb2.ExecutionStage.QUEUED in _stages(ops)
    (out,) = resp.result.output_files
    assert out.path == "out.txt" and _blob(cas, out.digest) == b"HELLO\n"
    assert _blob(cas, resp.result.stdout_digest) == b"done\n"
    assert resp.result.execution_metadata.worker

    ops2, again = execute(execution, digest)
    assert again.cached_result and len(ops2) == 1
    assert again.result.output_files[0].digest == out.digest

    _, forced = execute(execution, digest, skip_cache_lookup=True)
    assert not forced.cached_result and forced.status.code == code_pb2.OK


def test_missing_inputs_are_failed_precondition_with_each_blob(
    cas: RemoteStore, execution: re_grpc.ExecutionStub
) -> None:
    store_inputs = {"a.txt": b"present", "sub/b.txt": b"never uploaded"}
    # Build the action locally, then upload every blob except b.txt's.
    mem = MemoryStore()
    digest = make_action(mem, ["/bin/cat", "a.txt"], inputs=store_inputs)
    absent = Digest.of(b"never uploaded")
    for d in list(mem._blobs):
        if d != absent:
            cas.put(mem.get(d), expected=d)
    _, resp = execute(execution, digest)
    assert resp.status.code == code_pb2.FAILED_PRECONDITION
    (detail,) = resp.status.details
    failure = error_details_pb2.PreconditionFailure()
    assert detail.Unpack(failure)
    assert [(v.type, v.subject) for v in failure.violations] == [
        ("MISSING", f"blobs/blake3/{absent.hash}/{absent.size}")
    ]
    # The action itself missing: its digest is the one violation.
    ghost = Digest.of(b"no such action")
    _, resp = execute(execution, ghost)
    assert resp.status.code == code_pb2.FAILED_PRECONDITION
    assert ghost.hash in resp.status.message
    # ... and the server keeps serving.
    ok = make_action(cas, ["/bin/true"])
    assert execute(execution, ok)[1].status.code == code_pb2.OK


def test_malformed_requests_are_grpc_errors(execution: re_grpc.ExecutionStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        list(execution.Execute(re_pb2.ExecuteRequest(), timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        list(
            execution.Execute(
                re_pb2.ExecuteRequest(
                    instance_name="nope", action_digest=re_pb2.Digest(hash="a" * 64, size_bytes=1)
                ),
                timeout=10,
            )
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as e:
        list(
            execution.WaitExecution(
                re_pb2.WaitExecutionRequest(name="operations/unknown"), timeout=10
            )
        )
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_identical_inflight_actions_share_one_operation(
    cas: RemoteStore, execution: re_grpc.ExecutionStub, tmp_path: Path
) -> None:
    counter = tmp_path / "runs"
    digest = make_action(cas, ["/bin/sh", "-c", f"echo x >> {counter}; sleep 1"], outputs=[])
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: execute(execution, digest), range(3)))
    names = {ops[-1].name for ops, _ in results}
    assert len(names) == 1
    assert all(resp.status.code == code_pb2.OK for _, resp in results)
    assert counter.read_text() == "x\n"  # one execution for three callers


def test_wait_execution_streams_the_same_operation(
    cas: RemoteStore, execution: re_grpc.ExecutionStub
) -> None:
    digest = make_action(cas, ["/bin/sh", "-c", "sleep 0.5; echo waited"])
    req = re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
        digest_function=DF.BLAKE3,
    )
    stream = execution.Execute(req, timeout=30)
    first = next(stream)
    stream.cancel()  # the client's stream breaks; the operation goes on
    ops = list(execution.WaitExecution(re_pb2.WaitExecutionRequest(name=first.name), timeout=30))
    assert ops[-1].name == first.name
    resp = _response(ops[-1])
    assert resp.status.code == code_pb2.OK
    assert _blob(cas, resp.result.stdout_digest) == b"waited\n"


def test_timeout_is_deadline_exceeded_and_not_cached(
    cas: RemoteStore, execution: re_grpc.ExecutionStub
) -> None:
    digest = make_action(cas, ["/bin/sh", "-c", "echo begin; sleep 30"], timeout_s=1)
    _, resp = execute(execution, digest)
    assert resp.status.code == code_pb2.DEADLINE_EXCEEDED
    assert _blob(cas, resp.result.stdout_digest) == b"begin\n"
    # Not cached: a second Execute runs it again (and times out again).
    _, again = execute(execution, digest)
    assert not again.cached_result and again.status.code == code_pb2.DEADLINE_EXCEEDED


def test_failed_actions_are_not_cached(cas: RemoteStore, execution: re_grpc.ExecutionStub) -> None:
    digest = make_action(cas, ["/bin/sh", "-c", "exit 2"])
    _, resp = execute(execution, digest)
    assert resp.status.code == code_pb2.OK and resp.result.exit_code == 2
    _, again = execute(execution, digest)
    assert not again.cached_result


def test_status_reports_workers_slots_and_job_states(
    cluster: Cluster, channel: grpc.Channel
) -> None:
    status = w_grpc.WorkersStub(channel).Status(w_pb2.StatusRequest(), timeout=10)
    (w,) = status.workers
    assert w.state == "CONNECTED" and w.build_slots == 2 and w.build_slots_used == 0
    assert w.job_slots == 1 and w.cpus >= 1 and w.memory_bytes > 0
    assert status.queued_actions == 0 and status.running_actions == 0
    assert status.jobs_by_state["PENDING"] == 0 and "NODE_FAIL" in status.jobs_by_state


def test_action_that_is_not_an_action_is_invalid_argument(
    cas: RemoteStore, execution: re_grpc.ExecutionStub
) -> None:
    # Parses as a protobuf message but names no command or input root.
    bogus = cas.put(b"\x52\x00", function=DigestFunction.BLAKE3)
    with pytest.raises(grpc.RpcError) as e:
        execute(execution, bogus)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "command_digest" in (e.value.details() or "")
    # A timeout above the server's maximum is refused before anything runs.
    too_long = make_action(cas, ["/bin/true"], timeout_s=10**7)
    with pytest.raises(grpc.RpcError) as e:
        execute(execution, too_long)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "maximum" in (e.value.details() or "")
