"""FindMissingBlobs read off its bytes (rbs.wire.find_missing) says what protobuf says.

Whenever the bulk reader takes a request, protobuf parses the same bytes to the same
instance name, function and digests; it takes every canonical request of well-formed
digests; and the answer it joins is the bytes protobuf writes for that response.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pbwire import field, varint

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.presence import blob_key, size_code, size_of_code
from rbs.wire.errors import InvalidRequest
from rbs.wire.find_missing import BulkRequest, decode_request, missing_response, read_request

HEX = "0123456789abcdef"
hashes = st.text(HEX, min_size=64, max_size=64)
sizes = st.one_of(st.integers(0, 300), st.integers(0, (1 << 63) - 1))
digests = st.builds(lambda h, s: re_pb2.Digest(hash=h, size_bytes=s), hashes, sizes)
requests = st.builds(
    lambda name, ds, fn: re_pb2.FindMissingBlobsRequest(
        instance_name=name, blob_digests=ds, digest_function=fn
    ),
    st.one_of(st.just(""), st.text(max_size=200)),
    st.lists(
        st.one_of(digests, st.sampled_from([re_pb2.Digest(hash="a" * 64, size_bytes=5)])),
        max_size=30,
    ),
    st.integers(0, 127),
)


def _same_as_protobuf(data: bytes, got: BulkRequest) -> None:
    msg = re_pb2.FindMissingBlobsRequest.FromString(data)
    assert got.instance_name == msg.instance_name
    assert got.digest_function == msg.digest_function
    assert [k.hex() for k in got.keys] == [d.hash for d in msg.blob_digests]
    assert got.keys == [blob_key(d.hash) for d in msg.blob_digests]
    assert [size_of_code(c) for c in got.codes] == [d.size_bytes for d in msg.blob_digests]
    assert got.codes == [size_code(d.size_bytes) for d in msg.blob_digests]
    assert (
        b"".join(got.entries)
        == re_pb2.FindMissingBlobsResponse(
            missing_blob_digests=msg.blob_digests
        ).SerializeToString()
    )


@settings(max_examples=300, deadline=None)
@given(requests)
def test_every_canonical_request_is_read_as_protobuf_reads_it(
    request: re_pb2.FindMissingBlobsRequest,
) -> None:
    data = request.SerializeToString()
    got = read_request(data)
    letters = "".join(d.hash for d in request.blob_digests).strip("0123456789")
    if request.blob_digests and not letters:
        assert got is None  # no letter to tell lowercase: protobuf reads it (1e-13 a hash)
        return
    assert got is not None
    _same_as_protobuf(data, got)


# Ways to write a request that protobuf accepts (or refuses) but that is not canonical.
def _odd_digest(d: re_pb2.Digest, how: str) -> bytes:
    h = field(1, 2, d.hash.encode())
    s = field(2, 0, varint(d.size_bytes))
    return {
        "size first": s + h,
        "zero size written": h + field(2, 0, b"\x00"),
        "long varint": h
        + field(2, 0, varint(d.size_bytes)[:-1] + bytes([varint(d.size_bytes)[-1] | 0x80, 0])),
        "unknown field": h + s + field(7, 0, b"\x01"),
        "hash twice": field(1, 2, b"b" * 64) + h + s,
        "uppercase": field(1, 2, d.hash.upper().encode()) + s,
        "short hash": field(1, 2, d.hash[:40].encode()) + s,
        "not utf-8": field(1, 2, b"\xff" * 64) + s,
        "negative": h + field(2, 0, varint(-5)),
        "plain": h + s,
    }[how]


HOWS = [
    "size first",
    "zero size written",
    "long varint",
    "unknown field",
    "hash twice",
    "uppercase",
    "short hash",
    "not utf-8",
    "negative",
    "plain",
]


@st.composite
def odd_requests(draw: st.DrawFn) -> bytes:
    ds = draw(st.lists(digests, max_size=8))
    parts = [field(2, 2, _odd_digest(d, draw(st.sampled_from(HOWS)))) for d in ds]
    name = draw(st.sampled_from(["", "ci", "é"]))
    fn = draw(st.integers(0, 300))
    if name:
        parts.insert(draw(st.integers(0, len(parts))), field(1, 2, name.encode()))
    if fn:
        parts.insert(draw(st.integers(0, len(parts))), field(3, 0, varint(fn)))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), field(15, 2, b"unknown"))
    data = b"".join(parts)
    cut = draw(st.one_of(st.none(), st.integers(0, max(0, len(data) - 1))))
    return data if cut is None else data[:cut]


@settings(max_examples=500, deadline=None)
@given(st.one_of(odd_requests(), st.binary(max_size=200)))
def test_whatever_the_bytes_a_request_read_in_bulk_is_protobufs_request(data: bytes) -> None:
    got = read_request(data)
    if got is not None:
        _same_as_protobuf(data, got)
    else:  # the caller parses it with protobuf: a message, or INVALID_ARGUMENT
        try:
            re_pb2.FindMissingBlobsRequest.FromString(data)
        except Exception:
            with pytest.raises(InvalidRequest, match="not a valid protobuf message"):
                decode_request(data)


@settings(max_examples=200, deadline=None)
@given(requests, st.data())
def test_the_joined_answer_is_what_protobuf_writes(
    request: re_pb2.FindMissingBlobsRequest, data: st.DataObject
) -> None:
    got = read_request(request.SerializeToString())
    if got is None:  # hashes of digits only, left to protobuf
        return
    present = [data.draw(st.booleans()) for _ in got.entries]
    want = re_pb2.FindMissingBlobsResponse()
    seen = set()
    for d, p in zip(request.blob_digests, present, strict=True):
        if not p and (d.hash, d.size_bytes) not in seen:
            seen.add((d.hash, d.size_bytes))
            want.missing_blob_digests.add().CopyFrom(d)
    assert missing_response(got, present) == want.SerializeToString()


def test_size_codes_are_the_sizes_varints() -> None:
    for size in [0, 1, 127, 128, 300, 16383, 16384, 1 << 35, (1 << 63) - 1]:
        code = size_code(size)
        assert code == int.from_bytes(varint(size), "little")
        assert size_of_code(code) == size


def test_a_non_canonical_request_is_left_to_protobuf() -> None:
    d = re_pb2.Digest(hash="c" * 64, size_bytes=9)
    canonical = re_pb2.FindMissingBlobsRequest(blob_digests=[d], digest_function=7)
    data = canonical.SerializeToString()
    assert read_request(data) is not None
    reordered = data[-2:] + data[:-2]  # digest_function first
    assert read_request(reordered) is None
    assert decode_request(reordered) == canonical
    assert read_request(data + field(9, 0, b"\x01")) is None  # an unknown field
    assert read_request(field(2, 2, _odd_digest(d, "zero size written"))) is None
