"""The ActionCache service: hits only while complete, refused updates, persistence, inlining."""

from __future__ import annotations

import os

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from remote_harness import ServerThread, StartServer

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import digest_to_pb as pd
from rbs.cas.disk import DiskStore
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import ActionCacheClient, RemoteStore, connect

SHA = DigestFunction.SHA256
B3 = DigestFunction.BLAKE3


def store_of(server: ServerThread) -> DiskStore:
    return DiskStore(server.config.server.data_dir / "cas")


def result_with_outputs(store: DiskStore, fn: DigestFunction) -> re_pb2.ActionResult:
    out = store.put(b"output file", function=fn)
    err = store.put(b"some stderr", function=fn)
    return re_pb2.ActionResult(
        output_files=[re_pb2.OutputFile(path="out/a.txt", digest=pd(out))],
        exit_code=0,
        stdout_raw=b"inline stdout",
        stderr_digest=pd(err),
    )


@pytest.mark.parametrize("fn", [SHA, B3])
def test_update_then_hit(server: ServerThread, channel: grpc.Channel, fn: DigestFunction) -> None:
    ac = ActionCacheClient(channel)
    action = Digest.of(b"action " + fn.value.encode(), fn)
    assert ac.get(action) is None
    result = result_with_outputs(store_of(server), fn)
    assert ac.update(action, result) == result
    assert ac.get(action) == result
    hit = ac.get(action, inline_stderr=True)
    assert hit is not None and hit.stderr_raw == b"some stderr"


def test_hit_only_while_outputs_present(server: ServerThread, channel: grpc.Channel) -> None:
    ac = ActionCacheClient(channel)
    store = store_of(server)
    action = Digest.of(b"evicted action", SHA)
    result = result_with_outputs(store, SHA)
    ac.update(action, result)
    assert ac.get(action) is not None
    store.delete(Digest(function=SHA, hash=result.output_files[0].digest.hash, size=11))
    stub = re_grpc.ActionCacheStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.GetActionResult(re_pb2.GetActionResultRequest(action_digest=pd(action)))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    assert "no longer in the CAS" in err.value.details()
    assert ac.get(action) is None


def test_output_directory_trees_are_checked(server: ServerThread, channel: grpc.Channel) -> None:
    ac = ActionCacheClient(channel)
    store = store_of(server)
    inner = store.put(b"inside the tree", function=SHA)
    tree = re_pb2.Tree(root=re_pb2.Directory(files=[re_pb2.FileNode(name="f", digest=pd(inner))]))
    tree_digest = store.put_message(tree, SHA)
    result = re_pb2.ActionResult(
        output_directories=[re_pb2.OutputDirectory(path="outdir", tree_digest=pd(tree_digest))]
    )
    action = Digest.of(b"dir action", SHA)
    ac.update(action, result)
    assert ac.get(action) == result
    store.delete(inner)
    assert ac.get(action) is None


def test_update_with_missing_outputs_is_refused(channel: grpc.Channel) -> None:
    stub = re_grpc.ActionCacheStub(channel)
    missing = Digest.of(b"never uploaded", SHA)
    req = re_pb2.UpdateActionResultRequest(
        action_digest=pd(Digest.of(b"a", SHA)),
        action_result=re_pb2.ActionResult(
            output_files=[re_pb2.OutputFile(path="x", digest=pd(missing))]
        ),
    )
    with pytest.raises(grpc.RpcError) as err:
        stub.UpdateActionResult(req)
    assert err.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    trailer = dict(err.value.trailing_metadata())
    status = status_pb2.Status.FromString(trailer["grpc-status-details-bin"])
    pf = error_details_pb2.PreconditionFailure()
    assert status.details[0].Unpack(pf)
    assert [(v.type, v.subject) for v in pf.violations] == [
        ("MISSING", f"blobs/{missing.hash}/{missing.size}")
    ]


@pytest.mark.parametrize(
    ("req", "needle"),
    [
        (re_pb2.UpdateActionResultRequest(action_digest=re_pb2.Digest(hash="a" * 64)), "without"),
        (re_pb2.UpdateActionResultRequest(action_digest=re_pb2.Digest(hash="nothex")), "hash"),
        (
            re_pb2.UpdateActionResultRequest(
                action_digest=re_pb2.Digest(hash="a" * 64, size_bytes=1),
                action_result=re_pb2.ActionResult(
                    output_files=[re_pb2.OutputFile(path="x", digest=re_pb2.Digest(hash="q"))]
                ),
            ),
            "output file 'x'",
        ),
        (
            re_pb2.UpdateActionResultRequest(
                instance_name="elsewhere", action_digest=re_pb2.Digest(hash="a" * 64)
            ),
            "unknown instance",
        ),
    ],
)
def test_bad_updates(
    channel: grpc.Channel, req: re_pb2.UpdateActionResultRequest, needle: str
) -> None:
    stub = re_grpc.ActionCacheStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.UpdateActionResult(req)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert needle in err.value.details()


def test_instances_do_not_share_results(start: StartServer) -> None:
    srv = start(instance_names=("", "other"))
    with connect(srv.target) as ch:
        action = Digest.of(b"shared action", SHA)
        result = result_with_outputs(store_of(srv), SHA)
        ActionCacheClient(ch).update(action, result)
        assert ActionCacheClient(ch, instance="other").get(action) is None


def test_results_survive_a_restart(start: StartServer) -> None:
    first = start()
    action = Digest.of(b"durable action", B3)
    result = result_with_outputs(store_of(first), B3)
    with connect(first.target) as ch:
        ActionCacheClient(ch).update(action, result)
    first.stop()
    second = start()
    with connect(second.target) as ch:
        assert ActionCacheClient(ch).get(action) == result


def test_eviction_turns_a_hit_into_a_miss(start: StartServer) -> None:
    # A bounded CAS with no lease: uploads past the bound evict the oldest blobs, and
    # the result naming an evicted output stops being served.
    srv = start(max_size=1 << 20, lease=0)
    with connect(srv.target) as ch:
        remote = RemoteStore(ch)
        ac = ActionCacheClient(ch)
        out = remote.put(os.urandom(400 << 10), function=SHA)
        action = Digest.of(b"bounded action", SHA)
        ac.update(
            action, re_pb2.ActionResult(output_files=[re_pb2.OutputFile(path="o", digest=pd(out))])
        )
        assert ac.get(action) is not None
        os.utime(store_of(srv).path_of(out), (1, 1))  # make it the least recently used
        for _ in range(3):
            remote.put(os.urandom(400 << 10), function=SHA)
        assert not remote.contains(out)
        assert ac.get(action) is None


def test_an_output_removed_by_hand_is_never_a_hit(
    server: ServerThread, channel: grpc.Channel
) -> None:
    # FindMissingBlobs answers from the server's index, which a file removed behind the
    # server's back (not through rbs) outlives until its audit; a cached result's
    # outputs are checked on disk, so the result is not served.
    ac = ActionCacheClient(channel)
    store = store_of(server)
    action = Digest.of(b"action whose output goes by hand", SHA)
    result = result_with_outputs(store, SHA)
    ac.update(action, result)
    assert ac.get(action) == result
    out = Digest(function=SHA, hash=result.output_files[0].digest.hash, size=11)
    os.unlink(store.path_of(out))
    assert ac.get(action) is None
    # The check also put the index right: FindMissingBlobs now reports it missing.
    assert RemoteStore(channel).find_missing([out]) == [out]
