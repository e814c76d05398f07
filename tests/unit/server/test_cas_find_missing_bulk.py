"""FindMissingBlobs answered in bulk from the index gives, for any bytes, what the plain
protobuf path (the message, a Digest each, the same index) gives: the same answer
bytes, or the same status and message. Requests in every encoding: canonical, fields out of order,
unknown fields, repeated fields, odd varints, bad hashes and sizes, duplicates,
both digest functions, unknown functions and instance names, truncated bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pbwire import field, varint

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.digests import digest_to_pb
from rbs.model import Digest, DigestFunction
from rbs.server import cas_service
from rbs.server.cas_metrics import CountingDiskStore
from rbs.server.cas_service import CasServicer
from rbs.server.instances import Instances

SHA, B3 = DigestFunction.SHA256, DigestFunction.BLAKE3
DF = re_pb2.DigestFunction


class _Aborted(Exception):
    pass


class _Context:
    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        raise _Aborted(code, details)


class _Spying(CountingDiskStore):
    bulk_calls = 0

    def present_of(self, fn: DigestFunction, keys: list[bytes], codes: list[int]) -> Any:
        self.bulk_calls += 1
        return super().present_of(fn, keys, codes)


class _ProtobufOnly(CasServicer):
    """The servicer with its bulk path off: every request through its protobuf message
    and the Digest path, on the same store."""

    def _find_missing_bulk(self, store: CountingDiskStore, data: bytes) -> bytes | None:
        return None


class World:
    def __init__(self, root: Path) -> None:
        self.store = _Spying(root, index=True, lease=0)
        assert self.store.index is not None and self.store.index.ready.wait(60)
        instances = Instances(["ci"], [SHA, B3])
        self.bulk = CasServicer(self.store, instances, 4 << 20)
        self.plain = _ProtobufOnly(self.store, instances, 4 << 20)
        stored = [
            self.store.put(b"blob %d" % i, function=fn) for i in range(30) for fn in (SHA, B3)
        ]
        absent = [Digest.of(b"absent %d" % i, fn) for i in range(30) for fn in (SHA, B3)]
        twins = [
            Digest(function=B3 if d.function is SHA else SHA, hash=d.hash, size=d.size)
            for d in stored[:10]
        ]
        wrong = [Digest(function=d.function, hash=d.hash, size=d.size + 300) for d in stored[:10]]
        empty = [Digest.empty(SHA), Digest.empty(B3)]
        self.pool = [digest_to_pb(d) for d in [*stored, *absent, *twins, *wrong, *empty]]

    def answer(self, servicer: CasServicer, data: bytes) -> tuple[str, Any]:
        try:
            return "ok", asyncio.run(servicer.FindMissingBlobs(data, _Context()))  # type: ignore[arg-type]
        except _Aborted as e:
            code, details = e.args
            return code.name, details


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cas_service, "_BULK_BYTES", 0)  # every request tries the bulk path
        w = World(tmp_path_factory.mktemp("cas") / "s")
        yield w
        w.store.close()


def _digest(d: re_pb2.Digest, how: str) -> bytes:
    h, s = field(1, 2, d.hash.encode()), field(2, 0, varint(d.size_bytes))
    if how == "canonical":
        return bytes(d.SerializeToString())
    return {
        "size first": s + h,
        "zero size written": h + field(2, 0, b"\x00"),
        "long varint": h + field(2, 0, varint(d.size_bytes) + b"\x80\x00")[:-2] + b"\x80\x00"
        if d.size_bytes
        else h + field(2, 0, b"\x80\x00"),
        "unknown field": h + s + field(7, 0, b"\x01"),
        "uppercase": field(1, 2, d.hash.upper().encode()) + s,
        "short hash": field(1, 2, d.hash[:40].encode()) + s,
        "not hex": field(1, 2, b"g" * 64) + s,
        "negative": h + field(2, 0, varint(-5)),
        "digits only": field(1, 2, b"1" * 64) + s,
    }[how]


HOWS = ["canonical"] * 8 + [
    "size first",
    "zero size written",
    "long varint",
    "unknown field",
    "uppercase",
    "short hash",
    "not hex",
    "negative",
    "digits only",
]


@st.composite
def requests(draw: st.DrawFn, pool: list[re_pb2.Digest]) -> tuple[bytes, bool]:
    """(bytes, whether they are canonical with well-formed digests)."""
    ds = draw(st.lists(st.sampled_from(pool), max_size=40))
    hows = [
        draw(st.sampled_from(HOWS)) if draw(st.integers(0, 9)) == 0 else "canonical" for _ in ds
    ]
    parts = [field(2, 2, _digest(d, how)) for d, how in zip(ds, hows, strict=True)]
    name = draw(st.sampled_from(["", "", "ci", "nope"]))
    fn = draw(st.sampled_from([0, 0, DF.SHA256, DF.BLAKE3, DF.BLAKE3, DF.SHA1, 77, 300]))
    canonical = all(h == "canonical" for h in hows) and fn < 128
    odd = draw(st.sampled_from(["none", "none", "order", "unknown", "twice", "cut"]))
    if name:
        parts.insert(0, field(1, 2, name.encode()))
    if fn:
        parts.append(field(3, 0, varint(fn)))
    if odd == "order" and len(parts) > 1:
        parts.insert(0, parts.pop())
        canonical = False
    elif odd == "unknown":
        parts.insert(draw(st.integers(0, len(parts))), field(15, 2, b"x"))
        canonical = False
    elif odd == "twice":
        parts.insert(0, field(1, 2, b"nope"))
        parts.append(field(3, 0, varint(DF.SHA256)))
        canonical = False
    data = b"".join(parts)
    if odd == "cut" and data:
        data = data[: draw(st.integers(0, len(data) - 1))]
        canonical = False
    return data, canonical


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_the_bulk_answer_is_the_plain_protobuf_answer(world: World, data: st.DataObject) -> None:
    request, canonical = data.draw(requests(world.pool))
    before = world.store.bulk_calls
    bulk, plain = world.answer(world.bulk, request), world.answer(world.plain, request)
    assert bulk == plain
    if canonical and request and bulk[0] == "ok":
        assert world.store.bulk_calls == before + 1, "a canonical request went the slow way"


def test_a_large_request_of_duplicates_and_empties_is_answered_once_each(world: World) -> None:
    absent = [Digest.of(b"never stored %d" % i, B3) for i in range(3)]
    asked = [digest_to_pb(d) for d in absent] * 2000 + [digest_to_pb(Digest.empty(B3))] * 500
    request = re_pb2.FindMissingBlobsRequest(blob_digests=asked, digest_function=DF.BLAKE3)
    kind, answer = world.answer(world.bulk, request.SerializeToString())
    assert kind == "ok"
    got = re_pb2.FindMissingBlobsResponse.FromString(answer).missing_blob_digests
    assert [(d.hash, d.size_bytes) for d in got] == [(d.hash, d.size) for d in absent]
