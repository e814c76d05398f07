"""RemoteStore and ActionCacheClient against a live server: the BlobStore contract over gRPC."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from remote_harness import ServerThread, StartServer

from rbs.cas.disk import DiskStore
from rbs.cas.errors import BlobNotFound, CasError, DigestMismatch
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteError, RemoteStore, connect, parse_target

SHA = DigestFunction.SHA256
B3 = DigestFunction.BLAKE3


def store_of(server: ServerThread) -> DiskStore:
    return DiskStore(server.config.server.data_dir / "cas")


@pytest.mark.parametrize("size", [0, 100, (1 << 20) + 1, 6 << 20])
@pytest.mark.parametrize("fn", [SHA, B3])
def test_put_get_round_trip(
    server: ServerThread, channel: grpc.Channel, size: int, fn: DigestFunction
) -> None:
    remote = RemoteStore(channel)
    data = os.urandom(size)
    d = remote.put(data, function=fn)
    assert d == Digest.of(data, fn)
    assert remote.contains(d)
    assert remote.get(d) == data
    with remote.open(d) as f:
        assert f.read() == data
    assert store_of(server).get(d) == data


def test_put_file_writer_and_chunks(
    server: ServerThread, channel: grpc.Channel, tmp_path: Path
) -> None:
    remote = RemoteStore(channel)
    data = os.urandom(5 << 20)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    d = remote.put_file(path, function=SHA)
    assert d == Digest.of(data, SHA)
    assert b"".join(remote.read_chunks(d, offset=10, limit=100)) == data[10:110]
    # A writer spools a large upload to disk and sends it through ByteStream at commit.
    other = os.urandom(3 << 20)
    od = Digest.of(other, B3)
    with remote.writer(od) as w:
        for i in range(0, len(other), 1 << 16):
            w.write(other[i : i + (1 << 16)])
        w.commit()
    assert store_of(server).get(od) == other
    # The writer verifies before anything is sent.
    bad = Digest.of(b"expected", SHA)
    with pytest.raises(DigestMismatch), remote.writer(bad) as w:
        w.write(b"actually!")
        w.commit()
    assert not store_of(server).contains(bad)


def test_find_missing_and_batches(server: ServerThread, channel: grpc.Channel) -> None:
    remote = RemoteStore(channel)
    blobs = [f"blob {i}".encode() * (i + 1) for i in range(500)]
    digests = remote.put_blobs(blobs, SHA)
    absent = [Digest.of(b"absent", SHA), Digest.of(b"absent", B3)]
    assert remote.find_missing([*digests, *absent, Digest.empty(B3)]) == absent
    got = remote.get_blobs(digests)
    assert [got[d] for d in digests] == blobs
    with pytest.raises(BlobNotFound):
        remote.get(absent[0])
    with pytest.raises(BlobNotFound):
        remote.get(Digest(function=SHA, hash="cd" * 32, size=3 << 20))
    with pytest.raises(CasError, match="no delete"):
        remote.delete(digests[0])


def test_put_with_wrong_expected_digest(channel: grpc.Channel) -> None:
    remote = RemoteStore(channel)
    with pytest.raises(DigestMismatch):
        remote.put(b"data", expected=Digest.of(b"other", SHA))


def test_instance_name_is_sent(start: StartServer) -> None:
    srv = start(instance_names=("team",))
    with connect(srv.target) as ch:
        assert RemoteStore(ch, instance="team").put(b"team blob").size == 9
        with pytest.raises(RemoteError, match="unknown instance name 'other'") as err:
            RemoteStore(ch, instance="other").put(b"other blob")
        assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
        # The default instance stays accepted beside the named ones.
        assert RemoteStore(ch).put(b"default blob").size == 12


def test_unreachable_server() -> None:
    with (
        connect("grpc://127.0.0.1:1") as ch,
        pytest.raises(RemoteError, match=r"UNAVAILABLE.*running"),
    ):
        RemoteStore(ch).contains(Digest.of(b"x"))


@pytest.mark.parametrize(
    ("target", "expected"),
    [("grpc://h:1", "h:1"), ("h:2", "h:2"), ("grpc://[::1]:3", "[::1]:3"), ("grpcs://h:4", "h:4")],
)
def test_parse_target(target: str, expected: str) -> None:
    assert parse_target(target) == expected


@pytest.mark.parametrize("target", ["http://h:1", "", "h:"])
def test_parse_target_rejects(target: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_target(target)
