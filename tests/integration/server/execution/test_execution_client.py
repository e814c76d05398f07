"""ExecutionClient against an in-process server and worker: Execute, WaitExecution, decoded."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.memory import MemoryStore
from rbs.model import Digest, DigestFunction
from rbs.wire.execution_client import (
    ExecuteOutcome,
    ExecutionClient,
    RemoteActionResult,
    RemoteOutputFile,
    read_action_result,
)
from rbs.wire.reapi_client import ActionCacheClient, RemoteError, RemoteStore


@pytest.fixture
def client(channel: grpc.Channel) -> ExecutionClient:
    return ExecutionClient(channel)


def test_execute_decodes_the_result_then_hits_the_cache(
    cas: RemoteStore, client: ExecutionClient, channel: grpc.Channel
) -> None:
    digest = make_action(
        cas,
        ["/bin/sh", "-c", "tr a-z A-Z < in.txt > out.txt; chmod +x out.txt; echo done; echo e >&2"],
        inputs={"in.txt": b"hello\n"},
        outputs=["out.txt"],
    )
    outcome = client.execute(digest)
    assert isinstance(outcome, ExecuteOutcome)
    assert outcome.ok and not outcome.timed_out and outcome.code_name == "OK"
    assert not outcome.cached and outcome.missing == ()
    result = outcome.result
    (out,) = result.output_files
    assert out == RemoteOutputFile(
        path="out.txt", digest=Digest.of(b"HELLO\n", DigestFunction.BLAKE3), is_executable=True
    )
    assert result.exit_code == 0
    assert result.stdout_digest is not None and cas.get(result.stdout_digest) == b"done\n"
    assert result.stderr_digest is not None and cas.get(result.stderr_digest) == b"e\n"

    again = client.execute(digest)
    assert again.ok and again.cached and again.result.output_files == result.output_files
    # What the action cache holds reads the same way.
    cached = ActionCacheClient(channel).get(digest)
    assert cached is not None
    assert read_action_result(cached, DigestFunction.BLAKE3).output_files == result.output_files


def test_missing_inputs_are_listed_then_the_action_runs(
    cas: RemoteStore, client: ExecutionClient
) -> None:
    mem = MemoryStore()
    digest = make_action(mem, ["/bin/cat", "a.txt", "b.txt"], inputs={"a.txt": b"a", "b.txt": b"b"})
    absent = Digest.of(b"b", DigestFunction.BLAKE3)
    for d in list(mem._blobs):
        if d != absent:
            cas.put(mem.get(d), expected=d)
    outcome = client.execute(digest)
    assert outcome.code == code_pb2.FAILED_PRECONDITION
    assert outcome.code_name == "FAILED_PRECONDITION" and not outcome.ok
    assert outcome.missing == (absent,)
    cas.put(b"b")
    done = client.execute(digest)
    assert done.ok and done.missing == ()
    assert done.result.stdout_digest is not None and cas.get(done.result.stdout_digest) == b"ab"


def test_a_failed_action_is_ok_with_its_exit_code(
    cas: RemoteStore, client: ExecutionClient
) -> None:
    outcome = client.execute(make_action(cas, ["/bin/sh", "-c", "exit 2"]))
    assert outcome.ok and outcome.result.exit_code == 2 and not outcome.cached


def test_a_timeout_is_deadline_exceeded_with_what_the_action_wrote(
    cas: RemoteStore, client: ExecutionClient
) -> None:
    outcome = client.execute(
        make_action(cas, ["/bin/sh", "-c", "echo begin; sleep 30"], timeout_s=1)
    )
    assert outcome.timed_out and not outcome.ok and outcome.code_name == "DEADLINE_EXCEEDED"
    assert outcome.message
    assert outcome.result.stdout_digest is not None
    assert cas.get(outcome.result.stdout_digest) == b"begin\n"


def test_wait_follows_an_operation_an_execute_started(
    cas: RemoteStore, client: ExecutionClient, channel: grpc.Channel
) -> None:
    digest = make_action(cas, ["/bin/sh", "-c", "sleep 0.5; echo waited"])
    stream = re_grpc.ExecutionStub(channel).Execute(
        re_pb2.ExecuteRequest(
            action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
            digest_function=re_pb2.DigestFunction.BLAKE3,
        ),
        timeout=30,
    )
    first = next(stream)
    stream.cancel()  # the stream breaks; the operation goes on
    outcome = client.wait(first.name, DigestFunction.BLAKE3)
    assert outcome.ok
    assert outcome.result.stdout_digest is not None
    assert cas.get(outcome.result.stdout_digest) == b"waited\n"


def test_refusals_are_remote_errors_with_the_servers_reason(
    cas: RemoteStore, client: ExecutionClient, channel: grpc.Channel
) -> None:
    with pytest.raises(RemoteError, match="NOT_FOUND") as err:
        client.wait("operations/unknown", DigestFunction.BLAKE3)
    assert err.value.code is grpc.StatusCode.NOT_FOUND
    digest = make_action(cas, ["/bin/true"])
    with pytest.raises(RemoteError, match=r"executing .*INVALID_ARGUMENT.*unknown instance") as err:
        ExecutionClient(channel, instance="nope").execute(digest)
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT


def test_read_action_result_takes_the_given_function() -> None:
    d = Digest.of(b"x", DigestFunction.SHA256)
    ar = re_pb2.ActionResult(exit_code=3, stdout_raw=b"inline")
    ar.output_files.add(path="o", digest=re_pb2.Digest(hash=d.hash, size_bytes=d.size))
    assert read_action_result(ar, DigestFunction.SHA256) == RemoteActionResult(
        exit_code=3,
        output_files=(RemoteOutputFile(path="o", digest=d),),
        stdout_raw=b"inline",
    )
