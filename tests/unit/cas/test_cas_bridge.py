"""DigestBridge and TwoLevelStore(remote_functions=...): a BLAKE3 build in front of a SHA256 server."""

from __future__ import annotations

import pytest

from rbs.cas.bridge import DigestBridge
from rbs.cas.errors import BlobNotFound
from rbs.cas.memory import MemoryStore
from rbs.cas.twolevel import TwoLevelStore
from rbs.model import Digest, DigestFunction

B3 = DigestFunction.BLAKE3
SHA = DigestFunction.SHA256


def _stores() -> tuple[MemoryStore, MemoryStore, TwoLevelStore]:
    local, remote = MemoryStore(), MemoryStore()
    return local, remote, TwoLevelStore(local, remote, remote_functions=[SHA])


def test_blobs_of_other_functions_stay_local() -> None:
    local, remote, store = _stores()
    b3 = store.put(b"blake3 content", function=B3)
    sha = store.put(b"sha256 content", function=SHA)
    assert local.contains(b3) and local.contains(sha)
    assert not remote.contains(b3)
    assert remote.contains(sha)
    store.push([b3, sha])
    assert not remote.contains(b3)
    # A BLAKE3 blob the local level lacks is missing: the server is never asked.
    gone = Digest.of(b"never stored", B3)
    assert store.find_missing([gone, sha]) == [gone]
    with pytest.raises(BlobNotFound):
        store.get(gone)


def test_bridge_gives_inputs_uploaded_sha256_twins() -> None:
    _local, remote, store = _stores()
    data = b"an input file\n" * 100
    b3 = store.put(data, function=B3)
    bridge = DigestBridge(store, local=B3, remote=SHA)
    twins = bridge.to_remote([b3, b3])
    sha = Digest.of(data, SHA)
    assert twins == {b3: sha}
    assert remote.get(sha) == data
    assert not remote.contains(b3)
    # And back: the twin maps to the original without hashing again.
    assert bridge.to_local(sha) == b3


def test_bridge_fetches_and_hashes_remote_outputs() -> None:
    local, remote, store = _stores()
    out = b"an output the server made"
    sha = remote.put(out, function=SHA)
    bridge = DigestBridge(store, local=B3, remote=SHA)
    b3 = bridge.to_local(sha)
    assert b3 == Digest.of(out, B3)
    assert local.get(b3) == out


def test_bridge_maps_the_empty_blob() -> None:
    _, _, store = _stores()
    bridge = DigestBridge(store, local=B3, remote=SHA)
    empty = Digest.of(b"", B3)
    assert bridge.to_remote([empty]) == {empty: Digest.of(b"", SHA)}
