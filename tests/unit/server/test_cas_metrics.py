"""The server's counting CAS: lookup hits and misses, and evictions, as /metrics reads them."""

from __future__ import annotations

from pathlib import Path

from rbs.model import Digest, DigestFunction
from rbs.server.cas_metrics import CountingDiskStore


def test_lookups_count_each_distinct_digest_once(tmp_path: Path) -> None:
    store = CountingDiskStore(tmp_path / "cas")
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
