"""A corrupt blob in the server's CAS is never served: NOT_FOUND before the first byte."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from remote_harness import ServerThread

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.cas.digests import digest_to_pb
from rbs.cas.disk import DiskStore
from rbs.model import Digest, DigestFunction
from rbs.wire.resource_names import format_read_name

pytestmark = [pytest.mark.timeout(60), pytest.mark.chaos]

LARGE = (5 << 20) + 3
# Digests without a function are SHA256 on the wire: keep every blob SHA256.
SHA = DigestFunction.SHA256


def store_of(server: ServerThread) -> DiskStore:
    return DiskStore(server.config.server.data_dir / "cas")


def flip_byte(path: Path, at: int) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    os.chmod(path, 0o444)


def payload(n: int) -> bytes:
    return (b"abcdefghijklmnop" * (n // 16 + 1))[:n]


def corrupt_blob(server: ServerThread, data: bytes, at: int) -> Digest:
    store = store_of(server)
    d = store.put(data, function=SHA)
    flip_byte(store.path_of(d), at)
    return d


def assert_removed_not_found(err: grpc.RpcError, server: ServerThread, d: Digest) -> None:
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert str(d) in (err.details() or "")
    assert "corrupt" in (err.details() or "") and "removed" in (err.details() or "")
    assert not store_of(server).path_of(d).exists()


@pytest.mark.parametrize(
    ("size", "at", "offset"),
    [
        (100, 99, 0),  # small: served from the event loop
        (LARGE, LARGE - 1, 0),  # large, corrupt at the end: a streamed check comes too late
        (LARGE, 0, LARGE - 100),  # corrupt before the offset read
        (100, 0, 50),
    ],
)
def test_bytestream_read_of_a_corrupt_blob_sends_no_byte(
    server: ServerThread, channel: grpc.Channel, size: int, at: int, offset: int
) -> None:
    d = corrupt_blob(server, payload(size), at)
    bs = bs_grpc.ByteStreamStub(channel)
    got = b""
    req = bs_pb2.ReadRequest(resource_name=format_read_name("", d), read_offset=offset)
    with pytest.raises(grpc.RpcError) as e:
        for r in bs.Read(req, timeout=30):
            got += r.data
    assert got == b""
    assert_removed_not_found(e.value, server, d)


def test_bytestream_read_of_a_good_blob_at_an_offset(
    server: ServerThread, channel: grpc.Channel
) -> None:
    data = payload(LARGE)
    d = store_of(server).put(data, function=SHA)
    bs = bs_grpc.ByteStreamStub(channel)
    for offset in (LARGE - 100, 0, 7):
        req = bs_pb2.ReadRequest(resource_name=format_read_name("", d), read_offset=offset)
        assert b"".join(r.data for r in bs.Read(req, timeout=30)) == data[offset:]


def test_batch_read_reports_a_corrupt_blob_not_found_and_removes_it(
    server: ServerThread, channel: grpc.Channel
) -> None:
    good = store_of(server).put(b"good bytes", function=SHA)
    bad = corrupt_blob(server, payload(1000), 500)
    cas = re_grpc.ContentAddressableStorageStub(channel)
    resp = cas.BatchReadBlobs(
        re_pb2.BatchReadBlobsRequest(digests=[digest_to_pb(good), digest_to_pb(bad)]), timeout=30
    )
    ok, failed = resp.responses
    assert (ok.status.code, ok.data) == (0, b"good bytes")
    assert failed.status.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert failed.data == b""
    assert str(bad) in failed.status.message and "corrupt" in failed.status.message
    assert not store_of(server).path_of(bad).exists()


def _dir_with(files: dict[str, Digest], dirs: dict[str, Digest]) -> re_pb2.Directory:
    return re_pb2.Directory(
        files=[re_pb2.FileNode(name=n, digest=digest_to_pb(d)) for n, d in sorted(files.items())],
        directories=[
            re_pb2.DirectoryNode(name=n, digest=digest_to_pb(d)) for n, d in sorted(dirs.items())
        ],
    )


def test_get_tree_with_a_corrupt_root_is_not_found_naming_it(
    server: ServerThread, channel: grpc.Channel
) -> None:
    store = store_of(server)
    f = store.put(b"file", function=SHA)
    root = store.put_message(_dir_with({"a.txt": f}, {}), SHA)
    flip_byte(store.path_of(root), 2)
    cas = re_grpc.ContentAddressableStorageStub(channel)
    with pytest.raises(grpc.RpcError) as e:
        list(cas.GetTree(re_pb2.GetTreeRequest(root_digest=digest_to_pb(root)), timeout=30))
    assert_removed_not_found(e.value, server, root)


def test_get_tree_leaves_out_a_corrupt_subdirectory_and_removes_it(
    server: ServerThread, channel: grpc.Channel
) -> None:
    store = store_of(server)
    f = store.put(b"file", function=SHA)
    sub = store.put_message(_dir_with({"b.txt": f}, {}), SHA)
    root = store.put_message(_dir_with({"a.txt": f}, {"sub": sub}), SHA)
    flip_byte(store.path_of(sub), 2)
    cas = re_grpc.ContentAddressableStorageStub(channel)
    pages = list(cas.GetTree(re_pb2.GetTreeRequest(root_digest=digest_to_pb(root)), timeout=30))
    dirs = [d for p in pages for d in p.directories]
    assert [d.SerializeToString(deterministic=True) for d in dirs] == [store.get(root)]
    assert not store.path_of(sub).exists()
