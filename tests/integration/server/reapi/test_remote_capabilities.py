"""A client that follows Capabilities against a server configured otherwise: digest
functions (`[server] digest_functions`), instance names, zstd over ByteStream."""

from __future__ import annotations

import os

import grpc
import pytest
from remote_harness import StartServer

from rbs.client.remote_runner import negotiate
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteError, RemoteStore, connect
from rbs.wire.remote_caps import UnsupportedServer, read_offer

B3 = DigestFunction.BLAKE3
SHA = DigestFunction.SHA256


def test_sha256_only_server_offers_and_enforces_sha256(start: StartServer) -> None:
    srv = start(digest_functions=(SHA,))
    with connect(srv.target) as ch:
        offer = read_offer(ch)
        assert offer.cache_functions == (SHA,)
        assert offer.exec_functions == (SHA,)
        store = RemoteStore(ch)
        sha = store.put(b"hashed as the server asks", function=SHA)
        assert store.get(sha) == b"hashed as the server asks"
        # A client that ignores Capabilities is refused at once, with the offered list.
        with pytest.raises(RemoteError, match=r"blake3 is not offered .*\(it offers sha256") as e:
            store.put(b"hashed with blake3", function=B3)
        assert e.value.code is grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(RemoteError, match="blake3 is not offered"):
            store.find_missing([Digest.of(b"x", B3)])
        big = os.urandom(3 << 20)  # over the batch limit: ByteStream
        with pytest.raises(RemoteError, match="blake3 is not offered"):
            store.put(big, function=B3)


def test_negotiate_picks_sha256_and_refuses_a_forced_blake3(start: StartServer) -> None:
    srv = start(digest_functions=(SHA,))
    setup = negotiate(srv.target, token=None)
    assert setup.function is SHA
    with pytest.raises(UnsupportedServer, match=r"--digest-function blake3: .* offers sha256"):
        negotiate(srv.target, token=None, function=B3)
    assert (
        negotiate(
            start(data_dir=srv.config.server.data_dir.parent / "b").target, token=None
        ).function
        is B3
    )


def test_default_instance_is_kept_beside_named_ones(start: StartServer) -> None:
    srv = start(instance_names=("foo",))
    assert negotiate(srv.target, token=None, instance="foo").instance == "foo"
    assert negotiate(srv.target, token=None).instance == ""
    with pytest.raises(RemoteError, match="unknown instance name 'bar'"):
        negotiate(srv.target, token=None, instance="bar")


def test_zstd_bytestream_round_trip(start: StartServer) -> None:
    srv = start()
    with connect(srv.target) as ch:
        assert read_offer(ch).zstd
        zstd = RemoteStore(ch, zstd=True)
        plain = RemoteStore(ch)
        data = b"compressible line of text\n" * 200_000  # ~5 MiB, well over the batch limit
        d = zstd.put(data)
        assert plain.get(d) == data
        other = os.urandom(2 << 20)
        d2 = plain.put(other)
        assert zstd.get(d2) == other
        assert zstd.get(d) == data


def test_to_upload_skips_the_round_trip_for_a_few_small_blobs(start: StartServer) -> None:
    srv = start()
    with connect(srv.target) as ch:
        store = RemoteStore(ch)
        present = store.put(b"already there")
        small = [present, Digest.of(b"new and small", B3), Digest.of(b"", B3)]
        # Small in all: sent without asking, so the present one too (the empty one never).
        assert store.to_upload(small) == small[:2]
        big = [present, Digest.of(os.urandom(100 << 10), B3)]
        assert store.to_upload(big) == big[1:]
    with connect("grpc://127.0.0.1:1") as dead:
        # No call is made for small ones: even an unreachable server is not asked.
        assert RemoteStore(dead).to_upload(small) == small[:2]
