"""Random and malformed protobuf bytes at every RPC: the server answers each and keeps serving."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from remote_harness import ServerThread

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs.model import Digest, DigestFunction
from rbs.server.grpc_server import SERVICES as server_services

# Every service the server hosts, REAPI and rbs's own alike.
SERVICES = [descriptor_pool.Default().FindServiceByName(name) for name in server_services]
METHODS = [(s, m) for s in SERVICES for m in s.methods]
PAYLOADS_PER_METHOD = 40
# Statuses a well-behaved server may answer garbage with: never INTERNAL or UNKNOWN.
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def _valid_sample(input_type: str) -> bytes:
    """A plausible request of the method's type, to mutate (not just pure noise)."""
    cls = message_factory.GetMessageClass(
        descriptor_pool.Default().FindMessageTypeByName(input_type)
    )
    d = Digest.of(b"fuzz", DigestFunction.SHA256)
    pd = re_pb2.Digest(hash=d.hash, size_bytes=d.size)
    name = f"uploads/u/blobs/{d.hash}/{d.size}"
    samples: dict[str, object] = {
        "build.bazel.remote.execution.v2.FindMissingBlobsRequest": re_pb2.FindMissingBlobsRequest(
            blob_digests=[pd, pd]
        ),
        "build.bazel.remote.execution.v2.BatchUpdateBlobsRequest": re_pb2.BatchUpdateBlobsRequest(
            requests=[re_pb2.BatchUpdateBlobsRequest.Request(digest=pd, data=b"fuzz")]
        ),
        "build.bazel.remote.execution.v2.BatchReadBlobsRequest": re_pb2.BatchReadBlobsRequest(
            digests=[pd]
        ),
        "build.bazel.remote.execution.v2.GetTreeRequest": re_pb2.GetTreeRequest(
            root_digest=pd, page_size=2
        ),
        "build.bazel.remote.execution.v2.GetActionResultRequest": re_pb2.GetActionResultRequest(
            action_digest=pd
        ),
        "build.bazel.remote.execution.v2.UpdateActionResultRequest": (
            re_pb2.UpdateActionResultRequest(
                action_digest=pd,
                action_result=re_pb2.ActionResult(
                    output_files=[re_pb2.OutputFile(path="o", digest=pd)]
                ),
            )
        ),
        "google.bytestream.ReadRequest": bs_pb2.ReadRequest(
            resource_name=f"blobs/{d.hash}/{d.size}", read_offset=1
        ),
        "google.bytestream.WriteRequest": bs_pb2.WriteRequest(
            resource_name=name, data=b"fuzz", finish_write=True
        ),
        "google.bytestream.QueryWriteStatusRequest": bs_pb2.QueryWriteStatusRequest(
            resource_name=name
        ),
    }
    msg = samples.get(input_type) or cls()
    return msg.SerializeToString()  # type: ignore[attr-defined]


def _payloads(rng: random.Random, sample: bytes) -> list[bytes]:
    out = [b"", sample]
    for _ in range(PAYLOADS_PER_METHOD):
        kind = rng.randrange(4)
        if kind == 0:
            out.append(rng.randbytes(rng.randrange(1, 200)))
        elif kind == 1 and sample:
            out.append(sample[: rng.randrange(len(sample))])
        elif kind == 2 and sample:
            b = bytearray(sample)
            for _ in range(rng.randrange(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b))
        else:
            out.append(sample + rng.randbytes(rng.randrange(1, 20)))
    return out


def _caller(ch: grpc.Channel, path: str, cs: bool, ss: bool) -> Callable[[bytes], None]:
    if cs and ss:
        s = ch.stream_stream(path)
        return lambda b: list(s(iter([b, b]), timeout=20))  # type: ignore[func-returns-value]
    if cs and not ss:
        f = ch.stream_unary(path)
        return lambda b: f(iter([b, b]), timeout=20)
    if ss and not cs:
        g = ch.unary_stream(path)
        return lambda b: list(g(b, timeout=20))  # type: ignore[func-returns-value]
    h = ch.unary_unary(path)
    return lambda b: h(b, timeout=20)


def _verify_store(root: Path) -> None:
    """Every stored blob hashes to its name: nothing partial or corrupt was kept."""
    for fn in DigestFunction:
        base = root / "blobs" / fn.value
        if not base.exists():
            continue
        for path in base.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert Digest.of(data, fn).hash == path.name, path


@pytest.mark.timeout(120)
def test_garbage_at_every_rpc(server: ServerThread, channel: grpc.Channel) -> None:
    rng = random.Random(0xB5)
    seen: dict[str, set[grpc.StatusCode]] = {}
    for service, method in METHODS:
        path = f"/{service.full_name}/{method.name}"
        call = _caller(channel, path, method.client_streaming, method.server_streaming)
        for payload in _payloads(rng, _valid_sample(method.input_type.full_name)):
            try:
                call(payload)
                code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                code = e.code()
                assert code in ALLOWED, (path, payload, code, e.details())
            seen.setdefault(path, set()).add(code)
    assert len(seen) == len(METHODS)
    # Still serving, with nothing half-written left behind.
    caps = channel.unary_unary(
        "/build.bazel.remote.execution.v2.Capabilities/GetCapabilities",
        request_serializer=re_pb2.GetCapabilitiesRequest.SerializeToString,
        response_deserializer=re_pb2.ServerCapabilities.FromString,
    )(re_pb2.GetCapabilitiesRequest(), timeout=10)
    assert caps.high_api_version.minor == 3
    cas_root = server.config.server.data_dir / "cas"
    assert os.listdir(cas_root / "tmp") == []
    _verify_store(cas_root)
