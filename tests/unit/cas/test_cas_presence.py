"""find_missing from the disk store's index (rbs.cas.presence) answers as a stat would."""

from __future__ import annotations

import os
from pathlib import Path

from rbs.cas import presence
from rbs.cas.disk import DiskStore
from rbs.model import Digest, DigestFunction


def _blobs(n: int, tag: str = "blob") -> list[bytes]:
    return [f"{tag} {i}".encode() for i in range(n)]


def test_indexed_and_plain_stores_answer_alike(tmp_path: Path) -> None:
    indexed = DiskStore(tmp_path / "a", index=True)
    plain = DiskStore(tmp_path / "b")
    # Enough blobs that several shards outgrow their first bitmap and are read again.
    stored = [indexed.put(b) for b in _blobs(3000)]
    for b in _blobs(3000):
        plain.put(b)
    absent = [Digest.of(b) for b in _blobs(3000, "absent")]
    sha = [Digest.of(b"stored as sha256", DigestFunction.SHA256)]
    indexed.put(b"stored as sha256", function=DigestFunction.SHA256)
    plain.put(b"stored as sha256", function=DigestFunction.SHA256)
    query = [*absent[:10], *stored, *absent, Digest.of(b""), *sha, absent[0], stored[0]]
    for store in (indexed, DiskStore(tmp_path / "a", index=True), plain):
        assert store.find_missing(query) == absent
        assert store.find_missing(query) == absent  # again: from what it now remembers


def test_a_digest_of_the_wrong_size_is_missing(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", index=True)
    d = store.put(b"some bytes")
    wrong = Digest(function=d.function, hash=d.hash, size=d.size + 1)
    assert store.find_missing([wrong]) == [wrong]


def test_a_blob_written_after_its_shard_was_read_is_found(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", index=True)
    blobs = _blobs(200)
    digests = [Digest.of(b) for b in blobs]
    assert store.find_missing(digests) == digests  # every shard read, all empty
    with store.batch() as b:
        for data in blobs[:100]:
            b.put(data)
    store.put_file(_file(tmp_path, blobs[100]))
    assert store.find_missing(digests) == digests[101:]


def _file(tmp_path: Path, data: bytes) -> Path:
    p = tmp_path / "file"
    p.write_bytes(data)
    return p


def test_a_blob_removed_behind_the_store_is_missing_once_outside_the_lease(
    tmp_path: Path,
) -> None:
    # With a lease of 0 s nothing found earlier is taken on trust: every set bit stats.
    store = DiskStore(tmp_path / "s", index=True, lease=0)
    d = store.put(b"removed by another process")
    assert store.find_missing([d]) == []
    os.unlink(store.path_of(d))
    assert store.find_missing([d]) == [d]


def test_delete_and_eviction_are_seen(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", index=True, lease=0)
    digests = [store.put(b) for b in _blobs(50)]
    assert store.find_missing(digests) == []
    assert store.delete(digests[0])
    assert store.find_missing(digests) == digests[:1]
    result = store.gc(max_size=0)
    assert result.after_bytes == 0
    assert store.find_missing(digests) == digests
    again = store.put(_blobs(1)[0])
    assert store.find_missing(digests) == digests[1:] and again == digests[0]


def test_a_blob_another_process_writes_is_found_once_the_shards_are_read_again(
    tmp_path: Path,
) -> None:
    store = DiskStore(tmp_path / "s", index=True)
    other = DiskStore(tmp_path / "s")  # another writer of the same folder
    d = Digest.of(b"written elsewhere")
    assert store.find_missing([d]) == [d]
    other.put(b"written elsewhere")
    # The documented limit: this store has read that shard and did not see the write.
    assert store.find_missing([d]) == [d]
    assert store.index is not None
    store.index.forget_shards()
    assert store.find_missing([d]) == []


def test_a_shard_bitmap_holds_every_name_it_was_given() -> None:
    names = [Digest.of(b).hash for b in _blobs(5000)]
    shard = presence._Shard(names[:2500])
    assert all(shard.may_hold(n) for n in names[:2500])
    assert shard.capacity >= 2500
    # Names it was not given are mostly refused: at least 32 bits per name.
    false_hits = sum(shard.may_hold(n) for n in names[2500:])
    assert false_hits < 2500 // 8
    # Files in a shard folder that are not blob names are not counted.
    assert presence._Shard(["x", "tmp.1", "zzzzzzzzzz"]).names == 0
