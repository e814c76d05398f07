"""Capabilities and the ContentAddressableStorage service over real gRPC on 127.0.0.1."""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest
import zstandard
from remote_harness import ServerThread, StartServer

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import digest_to_pb, function_to_pb
from rbs.cas.disk import DiskStore
from rbs.model import Digest, DigestFunction
from rbs.server.grpc_server import EXECUTION, SERVICES
from rbs.wire.reapi_client import connect

DF = re_pb2.DigestFunction
SHA = DigestFunction.SHA256
B3 = DigestFunction.BLAKE3


def pd(d: Digest) -> re_pb2.Digest:
    return digest_to_pb(d)


def store_of(server: ServerThread) -> DiskStore:
    return DiskStore(server.config.server.data_dir / "cas")


def test_capabilities(channel: grpc.Channel) -> None:
    caps = re_grpc.CapabilitiesStub(channel).GetCapabilities(re_pb2.GetCapabilitiesRequest())
    cc = caps.cache_capabilities
    assert list(cc.digest_functions) == [DF.SHA256, DF.BLAKE3]
    assert cc.action_cache_update_capabilities.update_enabled
    assert cc.max_batch_total_size_bytes == 4 << 20
    assert list(cc.supported_compressors) == [re_pb2.Compressor.ZSTD]
    assert (caps.low_api_version.major, caps.low_api_version.minor) == (2, 0)
    assert (caps.high_api_version.major, caps.high_api_version.minor) == (2, 3)
    ec = caps.execution_capabilities
    assert ec.digest_function == DF.SHA256
    assert list(ec.digest_functions) == [DF.SHA256, DF.BLAKE3]
    # Execution is advertised exactly when an Execution service is registered.
    assert ec.exec_enabled == (EXECUTION in SERVICES)


def test_find_missing_mixed_functions(server: ServerThread, channel: grpc.Channel) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    store = store_of(server)
    present_sha = store.put(b"present", function=SHA)
    present_b3 = store.put(b"present", function=B3)
    absent_sha = Digest.of(b"absent", SHA)
    # No digest_function: 64-hex hashes are SHA256.
    resp = cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(blob_digests=[pd(present_sha), pd(absent_sha)])
    )
    assert [d.hash for d in resp.missing_blob_digests] == [absent_sha.hash]
    # The BLAKE3 blob is found only when the request says BLAKE3.
    resp = cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(blob_digests=[pd(present_b3)], digest_function=DF.BLAKE3)
    )
    assert list(resp.missing_blob_digests) == []
    resp = cas.FindMissingBlobs(re_pb2.FindMissingBlobsRequest(blob_digests=[pd(present_b3)]))
    assert [d.hash for d in resp.missing_blob_digests] == [present_b3.hash]
    # The empty blob is always present.
    empty = Digest.empty(SHA)
    resp = cas.FindMissingBlobs(re_pb2.FindMissingBlobsRequest(blob_digests=[pd(empty)]))
    assert list(resp.missing_blob_digests) == []


def test_find_missing_many(channel: grpc.Channel) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    digests = [pd(Digest.of(str(i).encode(), SHA)) for i in range(3000)]
    resp = cas.FindMissingBlobs(re_pb2.FindMissingBlobsRequest(blob_digests=digests))
    assert len(resp.missing_blob_digests) == 3000


@pytest.mark.parametrize("fn", [SHA, B3])
def test_a_large_find_missing_answers_from_the_index_as_a_stat_would(
    server: ServerThread, channel: grpc.Channel, fn: DigestFunction
) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    store = store_of(server)
    present = [store.put(b"big query %d" % i, function=fn) for i in range(150)]
    absent = [Digest.of(b"not stored %d" % i, fn) for i in range(150)]
    other = SHA if fn is B3 else B3
    twins = [Digest(function=other, hash=d.hash, size=d.size) for d in present[:20]]
    wrong_size = [Digest(function=fn, hash=d.hash, size=d.size + 1) for d in present[:5]]
    asked = [*present, *absent, *absent[:10], Digest.empty(fn), *wrong_size]
    want = [*absent, *wrong_size]
    request = re_pb2.FindMissingBlobsRequest(
        blob_digests=[pd(d) for d in asked], digest_function=function_to_pb(fn)
    )
    for _ in range(2):  # the first may come before the index is built: a stat each
        resp = cas.FindMissingBlobs(request)
        assert [(d.hash, d.size_bytes) for d in resp.missing_blob_digests] == [
            (d.hash, d.size) for d in want
        ]
    # The twins (same hex name, other function) are missing under their own function.
    resp = cas.FindMissingBlobs(
        re_pb2.FindMissingBlobsRequest(
            blob_digests=[pd(d) for d in [*twins, *absent[:60]]],
            digest_function=function_to_pb(other),
        )
    )
    assert len(resp.missing_blob_digests) == 20 + 60
    # A malformed entry in a large request is named, as in a small one.
    bad = [pd(d) for d in absent[:100]] + [re_pb2.Digest(hash="A" * 64, size_bytes=1)]
    with pytest.raises(grpc.RpcError) as err:
        cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(blob_digests=bad, digest_function=function_to_pb(fn))
        )
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "blob_digests[100]" in err.value.details()


@pytest.mark.parametrize(
    ("digest", "function", "needle"),
    [
        (re_pb2.Digest(hash="xyz", size_bytes=1), 0, "malformed hash"),
        (re_pb2.Digest(hash="A" * 64, size_bytes=1), 0, "lowercase hex"),
        (re_pb2.Digest(hash="a" * 40, size_bytes=1), 0, "SHA1"),
        (re_pb2.Digest(hash="a" * 64, size_bytes=-5), 0, "negative"),
        (re_pb2.Digest(hash="a" * 64, size_bytes=1), DF.SHA1, "SHA256, BLAKE3"),
        (re_pb2.Digest(hash="a" * 64, size_bytes=1), 77, "not supported"),
    ],
)
def test_find_missing_rejects_bad_digests(
    channel: grpc.Channel, digest: re_pb2.Digest, function: int, needle: str
) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        cas.FindMissingBlobs(
            re_pb2.FindMissingBlobsRequest(blob_digests=[digest], digest_function=function)
        )
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert needle in err.value.details()


def test_unknown_instance_names_the_accepted_ones(start: StartServer) -> None:
    srv = start(instance_names=("", "ci/main"))
    with connect(srv.target) as ch:
        cas = re_grpc.ContentAddressableStorageStub(ch)
        ok = cas.FindMissingBlobs(re_pb2.FindMissingBlobsRequest(instance_name="ci/main"))
        assert list(ok.missing_blob_digests) == []
        with pytest.raises(grpc.RpcError) as err:
            cas.FindMissingBlobs(re_pb2.FindMissingBlobsRequest(instance_name="nope"))
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "'nope'" in err.value.details() and "'ci/main'" in err.value.details()


def test_batch_update_statuses_per_item(server: ServerThread, channel: grpc.Channel) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    good = Digest.of(b"good", SHA)
    lying = Digest.of(b"what the digest says", SHA)
    short = Digest(function=SHA, hash=Digest.of(b"abc", SHA).hash, size=4)
    zstd_blob = b"z" * 5000
    zd = Digest.of(zstd_blob, SHA)
    R = re_pb2.BatchUpdateBlobsRequest.Request
    resp = cas.BatchUpdateBlobs(
        re_pb2.BatchUpdateBlobsRequest(
            requests=[
                R(digest=pd(good), data=b"good"),
                R(digest=pd(lying), data=b"other bytes"),
                R(digest=pd(short), data=b"abc"),
                R(digest=re_pb2.Digest(hash="zz", size_bytes=2), data=b"zz"),
                R(
                    digest=pd(zd),
                    data=zstandard.ZstdCompressor().compress(zstd_blob),
                    compressor=re_pb2.Compressor.ZSTD,
                ),
                R(digest=pd(good), data=b"garbage", compressor=re_pb2.Compressor.ZSTD),
            ]
        )
    )
    codes = [r.status.code for r in resp.responses]
    OK, INVALID = 0, grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert codes == [OK, INVALID, INVALID, INVALID, OK, INVALID]
    assert "does not match" in resp.responses[1].status.message
    store = store_of(server)
    assert store.get(good) == b"good"
    assert store.get(zd) == zstd_blob
    assert not store.contains(lying) and not store.contains(short)
    assert list((server.config.server.data_dir / "cas" / "tmp").iterdir()) == []


def test_batch_limits(start: StartServer) -> None:
    srv = start(max_batch_size=64 << 10)
    with connect(srv.target) as ch:
        cas = re_grpc.ContentAddressableStorageStub(ch)
        data = b"x" * (40 << 10)
        d1, d2 = Digest.of(data, SHA), Digest.of(data + b"y", SHA)
        R = re_pb2.BatchUpdateBlobsRequest.Request
        with pytest.raises(grpc.RpcError) as err:
            cas.BatchUpdateBlobs(
                re_pb2.BatchUpdateBlobsRequest(
                    requests=[R(digest=pd(d1), data=data), R(digest=pd(d2), data=data + b"y")]
                )
            )
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "ByteStream" in err.value.details()
        assert not store_of(srv).contains(d1)
        with pytest.raises(grpc.RpcError) as err:
            cas.BatchReadBlobs(re_pb2.BatchReadBlobsRequest(digests=[pd(d1), pd(d2)]))
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_batch_read(server: ServerThread, channel: grpc.Channel) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    store = store_of(server)
    blob = b"read me " * 1000
    d = store.put(blob, function=B3)
    missing = Digest.of(b"missing", B3)
    resp = cas.BatchReadBlobs(
        re_pb2.BatchReadBlobsRequest(digests=[pd(d), pd(missing)], digest_function=DF.BLAKE3)
    )
    assert resp.responses[0].data == blob and resp.responses[0].status.code == 0
    assert resp.responses[1].status.code == grpc.StatusCode.NOT_FOUND.value[0]
    resp = cas.BatchReadBlobs(
        re_pb2.BatchReadBlobsRequest(
            digests=[pd(d)],
            digest_function=DF.BLAKE3,
            acceptable_compressors=[re_pb2.Compressor.ZSTD],
        )
    )
    r = resp.responses[0]
    assert r.compressor == re_pb2.Compressor.ZSTD and len(r.data) < len(blob)
    assert zstandard.ZstdDecompressor().decompress(r.data) == blob


def _tree(store: DiskStore, fn: DigestFunction) -> tuple[Digest, list[re_pb2.Directory]]:
    leaf = re_pb2.Directory(
        files=[re_pb2.FileNode(name="f", digest=pd(store.put(b"f", function=fn)))]
    )
    leaf_d = store.put_message(leaf, fn)
    dirs = [leaf]
    subs = []
    for i in range(5):
        mid = re_pb2.Directory(directories=[re_pb2.DirectoryNode(name="leaf", digest=pd(leaf_d))])
        mid.files.add(name=f"m{i}", digest=pd(store.put(f"m{i}".encode(), function=fn)))
        subs.append(re_pb2.DirectoryNode(name=f"d{i}", digest=pd(store.put_message(mid, fn))))
        dirs.append(mid)
    root = re_pb2.Directory(directories=subs)
    return store.put_message(root, fn), [root, *dirs[1:], leaf]


def test_get_tree_pages(server: ServerThread, channel: grpc.Channel) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    root, expected = _tree(store_of(server), B3)
    pages = list(
        cas.GetTree(
            re_pb2.GetTreeRequest(root_digest=pd(root), page_size=3, digest_function=DF.BLAKE3)
        )
    )
    assert [len(p.directories) for p in pages] == [3, 3, 1]
    assert [p.next_page_token for p in pages][-1] == ""
    got = [d for p in pages for d in p.directories]
    assert got == expected  # breadth first; the shared leaf appears once
    # Resuming from a token returns the rest.
    rest = list(
        cas.GetTree(
            re_pb2.GetTreeRequest(
                root_digest=pd(root),
                page_size=100,
                page_token=pages[0].next_page_token,
                digest_function=DF.BLAKE3,
            )
        )
    )
    assert [d for p in rest for d in p.directories] == expected[3:]


def test_get_tree_errors(channel: grpc.Channel) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    missing = Digest.of(b"no such dir", SHA)
    with pytest.raises(grpc.RpcError) as err:
        list(cas.GetTree(re_pb2.GetTreeRequest(root_digest=pd(missing))))
    assert err.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        list(cas.GetTree(re_pb2.GetTreeRequest(root_digest=pd(missing), page_token="bogus")))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_tmp_dir_cleaned_at_start(tmp_path: Path, start: StartServer) -> None:
    tmp = tmp_path / "data" / "cas" / "tmp"
    tmp.mkdir(parents=True)
    stale, live = tmp / "stale.upload", tmp / "live.upload"
    stale.write_bytes(b"half a blob")
    live.write_bytes(b"another process is writing this")
    os.utime(stale, (time.time() - 86400, time.time() - 86400))
    start()
    assert list(tmp.iterdir()) == [live]


def test_malformed_first_item_fails_only_itself(
    server: ServerThread, channel: grpc.Channel
) -> None:
    cas = re_grpc.ContentAddressableStorageStub(channel)
    good = Digest.of(b"fine", SHA)
    R = re_pb2.BatchUpdateBlobsRequest.Request
    resp = cas.BatchUpdateBlobs(
        re_pb2.BatchUpdateBlobsRequest(
            requests=[
                R(digest=re_pb2.Digest(hash="a" * 40, size_bytes=4), data=b"sha1"),
                R(digest=pd(good), data=b"fine"),
            ]
        )
    )
    assert [r.status.code for r in resp.responses] == [grpc.StatusCode.INVALID_ARGUMENT.value[0], 0]
    assert "SHA1" in resp.responses[0].status.message
    read = cas.BatchReadBlobs(
        re_pb2.BatchReadBlobsRequest(digests=[re_pb2.Digest(hash="zz", size_bytes=1), pd(good)])
    )
    assert [r.status.code for r in read.responses] == [grpc.StatusCode.INVALID_ARGUMENT.value[0], 0]
    assert read.responses[1].data == b"fine"
