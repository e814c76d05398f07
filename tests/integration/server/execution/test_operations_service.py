"""google.longrunning.Operations (what `bgd operation ...` calls) over live Execute operations."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable

import grpc
import pytest
from google.longrunning import operations_pb2
from google.longrunning import operations_pb2_grpc as lro_grpc
from google.protobuf import duration_pb2
from google.rpc import code_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.model import Digest
from rbs.wire.reapi_client import RemoteStore

DF = re_pb2.DigestFunction


def _request(digest: Digest) -> re_pb2.ExecuteRequest:
    return re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
        digest_function=DF.BLAKE3,
    )


def _stage(op: operations_pb2.Operation) -> int:
    md = re_pb2.ExecuteOperationMetadata()
    assert op.metadata.Unpack(md)
    return int(md.stage)


def _until(what: str, check: Callable[[], object], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_list_get_wait_cancel_delete(
    cas: RemoteStore, execution: re_grpc.ExecutionStub, channel: grpc.Channel
) -> None:
    ops = lro_grpc.OperationsStub(channel)
    slow = make_action(cas, ["/bin/sh", "-c", "sleep 60"])
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stream = pool.submit(lambda: list(execution.Execute(_request(slow), timeout=90)))

        def running() -> operations_pb2.Operation | None:
            listed = ops.ListOperations(operations_pb2.ListOperationsRequest(name=""))
            for op in listed.operations:
                if _stage(op) == re_pb2.ExecutionStage.EXECUTING:
                    return op
            return None

        op = running() or _until("the action to execute", running)
        assert isinstance(op, operations_pb2.Operation)
        assert op.name.startswith("operations/") and not op.done
        got = ops.GetOperation(operations_pb2.GetOperationRequest(name=op.name))
        assert got.name == op.name and not got.done

        def names(flt: str) -> list[str]:
            req = operations_pb2.ListOperationsRequest(name="", filter=flt)
            return [o.name for o in ops.ListOperations(req).operations]

        assert op.name in names("stage != COMPLETED")
        assert op.name in names("stage = executing")
        assert op.name not in names("stage = COMPLETED")

        waited = ops.WaitOperation(
            operations_pb2.WaitOperationRequest(
                name=op.name, timeout=duration_pb2.Duration(nanos=200_000_000)
            )
        )
        assert not waited.done
        with pytest.raises(grpc.RpcError) as err:
            ops.DeleteOperation(operations_pb2.DeleteOperationRequest(name=op.name))
        assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION

        ops.CancelOperation(operations_pb2.CancelOperationRequest(name=op.name))
        last = stream.result(timeout=60)[-1]
    resp = re_pb2.ExecuteResponse()
    assert last.done and last.response.Unpack(resp)
    assert resp.status.code == code_pb2.CANCELLED
    done = ops.WaitOperation(operations_pb2.WaitOperationRequest(name=op.name))
    assert done.done
    assert op.name in names("stage = COMPLETED")
    ops.DeleteOperation(operations_pb2.DeleteOperationRequest(name=op.name))
    with pytest.raises(grpc.RpcError) as err:
        ops.GetOperation(operations_pb2.GetOperationRequest(name=op.name))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND


def test_pages_and_bad_requests(
    cas: RemoteStore, execution: re_grpc.ExecutionStub, channel: grpc.Channel
) -> None:
    ops = lro_grpc.OperationsStub(channel)
    for i in range(3):
        digest = make_action(cas, ["/bin/sh", "-c", f"echo {i}"])
        assert list(execution.Execute(_request(digest), timeout=60))[-1].done
    first = ops.ListOperations(operations_pb2.ListOperationsRequest(name="", page_size=2))
    assert len(first.operations) == 2 and first.next_page_token
    rest = ops.ListOperations(
        operations_pb2.ListOperationsRequest(name="", page_size=2, page_token=first.next_page_token)
    )
    assert len(rest.operations) == 1 and not rest.next_page_token
    seen = {o.name for o in [*first.operations, *rest.operations]}
    assert len(seen) == 3
    for req, words in [
        (operations_pb2.ListOperationsRequest(filter="worker = w1"), "unsupported filter"),
        (operations_pb2.ListOperationsRequest(name="nope"), "unknown instance name 'nope'"),
        (operations_pb2.ListOperationsRequest(page_size=5000), "maximum of 1000"),
        (operations_pb2.ListOperationsRequest(page_token="x"), "page_token"),
    ]:
        with pytest.raises(grpc.RpcError) as err:
            ops.ListOperations(req)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert words in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        ops.GetOperation(operations_pb2.GetOperationRequest(name="operations/none"))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
