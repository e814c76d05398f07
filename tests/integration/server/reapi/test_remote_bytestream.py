"""ByteStream Read/Write/QueryWriteStatus over real gRPC: every resource-name form and fault."""

from __future__ import annotations

import itertools
import os
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remote_harness import ServerThread

from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.cas.disk import DiskStore
from rbs.cas.store import hash_file
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteStore
from rbs.wire.resource_names import Compressor, format_read_name, format_write_name

SHA = DigestFunction.SHA256
B3 = DigestFunction.BLAKE3
W = bs_pb2.WriteRequest


def store_of(server: ServerThread) -> DiskStore:
    return DiskStore(server.config.server.data_dir / "cas")


def tmp_files(server: ServerThread) -> list[str]:
    return os.listdir(server.config.server.data_dir / "cas" / "tmp")


def chunks(name: str, data: bytes, size: int = 1 << 16) -> Iterator[bs_pb2.WriteRequest]:
    offsets = list(range(0, len(data), size)) or [0]
    for i, off in enumerate(offsets):
        yield W(
            resource_name=name if i == 0 else "",
            write_offset=off,
            data=data[off : off + size],
            finish_write=i == len(offsets) - 1,
        )


def write(bs: bs_grpc.ByteStreamStub, reqs: Iterator[bs_pb2.WriteRequest]) -> int:
    return int(bs.Write(reqs).committed_size)


def read(bs: bs_grpc.ByteStreamStub, name: str, offset: int = 0, limit: int = 0) -> bytes:
    req = bs_pb2.ReadRequest(resource_name=name, read_offset=offset, read_limit=limit)
    return b"".join(r.data for r in bs.Read(req))


def up(digest: Digest, instance: str = "", comp: Compressor = Compressor.IDENTITY) -> str:
    return format_write_name(instance, str(uuid.uuid4()), digest, comp)


@pytest.mark.parametrize("size", [0, 10, 64 << 10, (64 << 10) + 1, 3 << 20])
@pytest.mark.parametrize("fn", [SHA, B3])
def test_write_then_read(
    server: ServerThread, channel: grpc.Channel, size: int, fn: DigestFunction
) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = os.urandom(size)
    d = Digest.of(data, fn)
    name = up(d)
    assert ("/blake3/" in name) == (fn is B3)
    assert write(bs, chunks(name, data)) == size
    assert store_of(server).get(d) == data
    assert read(bs, format_read_name("", d)) == data
    assert tmp_files(server) == []


def test_write_of_present_blob_finishes_early(server: ServerThread, channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = os.urandom(200_000)
    d = store_of(server).put(data, function=SHA)
    assert write(bs, chunks(up(d), data)) == d.size
    comp = up(d, comp=Compressor.ZSTD)
    assert write(bs, iter([W(resource_name=comp, data=b"x", finish_write=True)])) == -1


def test_read_offsets_and_limits(server: ServerThread, channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    for size in (1000, 3 << 20):
        data = os.urandom(size)
        d = store_of(server).put(data, function=B3)
        name = format_read_name("", d)
        assert read(bs, name, offset=100) == data[100:]
        assert read(bs, name, offset=100, limit=50) == data[100:150]
        assert read(bs, name, offset=size) == b""
        assert read(bs, name, limit=size * 2) == data
        with pytest.raises(grpc.RpcError) as err:
            read(bs, name, offset=size + 1)
        assert err.value.code() is grpc.StatusCode.OUT_OF_RANGE
        with pytest.raises(grpc.RpcError) as err:
            read(bs, name, offset=-1)
        assert err.value.code() is grpc.StatusCode.OUT_OF_RANGE
        with pytest.raises(grpc.RpcError) as err:
            read(bs, name, limit=-1)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_read_missing_is_not_found(channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    for size in (5, 5 << 20):
        d = Digest(function=SHA, hash="ab" * 32, size=size)
        with pytest.raises(grpc.RpcError) as err:
            read(bs, format_read_name("", d))
        assert err.value.code() is grpc.StatusCode.NOT_FOUND


def test_corrupt_stored_blob_is_not_served(server: ServerThread, channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    store = store_of(server)
    d = store.put(b"x" * 1000, function=SHA)
    path = store.path_of(d)
    os.chmod(path, 0o644)
    path.write_bytes(b"y" * 1000)
    with pytest.raises(grpc.RpcError) as err:
        read(bs, format_read_name("", d))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    assert not path.exists()


@pytest.mark.parametrize("size", [1000, 3 << 20])
def test_zstd_round_trip(server: ServerThread, channel: grpc.Channel, size: int) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = (b"compressible " * (size // 13 + 1))[:size]
    d = Digest.of(data, B3)
    packed = zstandard.ZstdCompressor().compress(data)
    assert write(bs, chunks(up(d, comp=Compressor.ZSTD), packed, 1 << 14)) == len(packed)
    assert store_of(server).get(d) == data
    got = read(bs, format_read_name("", d, Compressor.ZSTD))
    assert len(got) < size
    assert zstandard.ZstdDecompressor().decompressobj().decompress(got) == data
    # Offsets of compressed reads count uncompressed bytes.
    tail = read(bs, format_read_name("", d, Compressor.ZSTD), offset=size - 10)
    assert zstandard.ZstdDecompressor().decompressobj().decompress(tail) == data[-10:]
    with pytest.raises(grpc.RpcError) as err:
        read(bs, format_read_name("", d, Compressor.ZSTD), limit=5)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def _bad_uploads(d: Digest, data: bytes) -> dict[str, list[bs_pb2.WriteRequest]]:
    name = up(d)
    half = len(data) // 2
    return {
        "truncated": [W(resource_name=name, data=data[:half])],
        "truncated_at_end": [
            W(resource_name=name, data=data[:half]),
            W(write_offset=half, data=data[half:]),
        ],
        "short_then_finish": [W(resource_name=name, data=data[:half], finish_write=True)],
        "corrupt": [
            W(resource_name=name, data=bytes([data[0] ^ 0xFF]) + data[1:], finish_write=True)
        ],
        "too_long": [W(resource_name=name, data=data + b"more", finish_write=True)],
        "gap": [
            W(resource_name=name, data=data[:half]),
            W(write_offset=half + 1, data=data[half + 1 :], finish_write=True),
        ],
        "resume_offset": [W(resource_name=name, write_offset=10, data=data[10:])],
        "other_name": [
            W(resource_name=name, data=data[:half]),
            W(resource_name=up(d), write_offset=half, data=data[half:], finish_write=True),
        ],
        "after_finish": [
            W(resource_name=name, data=data, finish_write=True),
            W(write_offset=len(data), data=b"x"),
        ],
        "bad_zstd": [
            W(
                resource_name=up(d, comp=Compressor.ZSTD),
                data=b"not zstd at all" * 100,
                finish_write=True,
            )
        ],
        "zstd_wrong_content": [
            W(
                resource_name=up(d, comp=Compressor.ZSTD),
                data=zstandard.ZstdCompressor().compress(data[::-1]),
                finish_write=True,
            )
        ],
    }


@pytest.mark.parametrize("size", [5000, 3 << 20])
@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "truncated_at_end",
        "short_then_finish",
        "corrupt",
        "too_long",
        "gap",
        "resume_offset",
        "other_name",
        "bad_zstd",
        "zstd_wrong_content",
    ],
)
def test_bad_upload_stores_nothing(
    server: ServerThread, channel: grpc.Channel, case: str, size: int
) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = os.urandom(size)
    d = Digest.of(data, SHA)
    with pytest.raises(grpc.RpcError) as err:
        write(bs, iter(_bad_uploads(d, data)[case]))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert not store_of(server).contains(d)
    assert tmp_files(server) == []
    # The server keeps serving: a correct upload of the same blob works.
    assert write(bs, chunks(up(d), data)) == size


def test_data_after_finish_is_ignored_once_committed(
    server: ServerThread, channel: grpc.Channel
) -> None:
    # The server answers at finish_write; requests after it are never read.
    bs = bs_grpc.ByteStreamStub(channel)
    data = b"hello world"
    d = Digest.of(data, SHA)
    assert write(bs, iter(_bad_uploads(d, data)["after_finish"])) == len(data)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "blobs",
        f"uploads/0f1e-upload/blobs/{'a' * 64}",
        f"uploads/0f1e-upload/blobs/{'a' * 64}/-1",
        f"uploads/0f1e-upload/blobs/{'a' * 64}/ten",
        f"uploads/0f1e-upload/blobs/{'a' * 40}/10",
        f"uploads/0f1e-upload/blobs/sha256tree/{'a' * 64}/10",
        f"uploads/0f1e-upload/compressed-blobs/brotli/{'a' * 64}/10",
        f"uploads//blobs/{'a' * 64}/10",
        f"blobs/{'a' * 64}/10",
        f"other/uploads/0f1e-upload/blobs/{'a' * 64}/10",
    ],
)
def test_malformed_write_names(server: ServerThread, channel: grpc.Channel, name: str) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        write(bs, iter([W(resource_name=name, data=b"0123456789", finish_write=True)]))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details()


def test_empty_write_stream(channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        write(bs, iter([]))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_query_write_status(server: ServerThread, channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = b"queried"
    d = Digest.of(data, SHA)
    name = up(d)
    with pytest.raises(grpc.RpcError) as err:
        bs.QueryWriteStatus(bs_pb2.QueryWriteStatusRequest(resource_name=name))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    write(bs, chunks(name, data))
    st = bs.QueryWriteStatus(bs_pb2.QueryWriteStatusRequest(resource_name=name))
    assert st.complete and st.committed_size == len(data)


def test_client_that_goes_away_leaves_nothing(server: ServerThread, channel: grpc.Channel) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = os.urandom(4 << 20)
    d = Digest.of(data, SHA)
    name = up(d)

    def reqs() -> Iterator[bs_pb2.WriteRequest]:
        yield W(resource_name=name, data=data[: 2 << 20])
        # The upload is in flight now; QueryWriteStatus says so without committing bytes.
        st = bs.QueryWriteStatus(bs_pb2.QueryWriteStatusRequest(resource_name=name))
        assert not st.complete and st.committed_size == 0
        raise RuntimeError("client dies mid-upload")

    future = bs.Write.future(reqs())
    with pytest.raises(grpc.RpcError):
        future.result(timeout=30)
    # Cleanup runs when the server notices the cancelled call; wait for it, bounded.
    deadline = time.monotonic() + 20
    while tmp_files(server) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert tmp_files(server) == []
    assert not store_of(server).contains(d)


def test_large_blobs_stream_in_constant_memory(
    server: ServerThread, channel: grpc.Channel, tmp_path: Path
) -> None:
    # Python-level allocations of client and server together stay far below the blob
    # size: neither side ever holds the whole blob.
    size = 96 << 20
    path = tmp_path / "big"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(size >> 20):
            f.write(i.to_bytes(4, "little") + block[4:])
    remote = RemoteStore(channel)
    d = hash_file(path, SHA)
    tracemalloc.start()
    try:
        remote.put_file(path, expected=d)
        got = sum(len(c) for c in remote.read_chunks(d))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == size
    assert store_of(server).contains(d)
    assert peak < 24 << 20, f"peak Python allocations {peak >> 20} MiB for a {size >> 20} MiB blob"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    size=st.sampled_from([1, 1000, (64 << 10) + 7, (1 << 20) + 3, (2 << 20) + 11]),
    cuts=st.lists(st.floats(0, 1), max_size=12),
    compressed=st.booleans(),
)
def test_any_chunking_stores_the_same_blob(
    server: ServerThread, channel: grpc.Channel, size: int, cuts: list[float], compressed: bool
) -> None:
    bs = bs_grpc.ByteStreamStub(channel)
    data = os.urandom(size)
    d = Digest.of(data, B3)
    payload = zstandard.ZstdCompressor().compress(data) if compressed else data
    bounds = sorted({0, len(payload), *(int(c * len(payload)) for c in cuts)})
    name = up(d, comp=Compressor.ZSTD if compressed else Compressor.IDENTITY)
    reqs = [
        W(
            resource_name=name if i == 0 else "",
            write_offset=a,
            data=payload[a:b],
            finish_write=b == len(payload),
        )
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]
    assert write(bs, iter(reqs)) in (len(payload), -1, d.size)
    assert read(bs, format_read_name("", d)) == data
