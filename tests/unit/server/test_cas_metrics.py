"""The server's counting CAS: lookup hits and misses, and evictions, as /metrics reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbs.model import Digest, DigestFunction
from rbs.server.cas_metrics import CountingDiskStore
from rbs.server.cluster import open_store
from rbs.server.config import config_from_dict


@pytest.mark.parametrize("index", [False, True])
def test_lookups_count_each_distinct_digest_once(tmp_path: Path, index: bool) -> None:
    store = CountingDiskStore(tmp_path / "cas", index=index)
    held = store.put(b"held")
    absent = Digest.of(b"absent", DigestFunction.SHA256)
    empty = Digest.of(b"", DigestFunction.SHA256)
    assert store.find_missing([held, absent, held, empty]) == [absent]
    assert (store.lookup_hits, store.lookup_misses) == (1, 1)


def test_evictions_count_what_gc_removed(tmp_path: Path) -> None:
    store = CountingDiskStore(tmp_path / "cas", max_size=3000, lease=0)
    for i in range(10):
        store.put(bytes([i]) * 1000)  # each write past the bound evicts down to 90% of it
    assert store.evicted_blobs >= 7
    assert store.evicted_bytes == store.evicted_blobs * 1000
    assert store.stat().total_bytes <= 3000


def test_the_server_store_answers_from_its_index(tmp_path: Path) -> None:
    store = open_store(config_from_dict({"server": {"data_dir": str(tmp_path)}}))
    try:
        assert isinstance(store, CountingDiskStore) and store.index is not None
        assert store.index.ready.wait(60)
        held = store.put(b"held")
        twin = Digest(function=DigestFunction.SHA256, hash=held.hash, size=held.size)
        assert store.find_missing([held, twin]) == [twin]  # per digest function
        CountingDiskStore(tmp_path / "cas").delete(held)  # `rbs cas gc` by hand, say
        assert store.find_missing([held]) == [held]
    finally:
        store.close()


def test_a_counting_store_with_the_index_counts_by_hash_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CountingDiskStore(tmp_path / "cas", index=True)
    assert store.index is not None and store.index.ready.wait(60)
    held = store.put(b"held")
    absent = Digest.of(b"absent", DigestFunction.SHA256)
    other = Digest.of(b"other", DigestFunction.SHA256)
    asked = [absent, held, other]
    assert store.find_missing(asked) == [absent, other]
    store.put(b"other", function=DigestFunction.SHA256)  # written here: the index knows
    # Neither the index nor the counting hashes a Digest (its hash is Python code):
    # the answer and the counts go by the hash strings.
    monkeypatch.setattr(Digest, "__hash__", lambda self: pytest.fail("a Digest was hashed"))
    assert store.find_missing(iter(asked)) == [absent]
    assert (store.lookup_hits, store.lookup_misses) == (3, 3)
