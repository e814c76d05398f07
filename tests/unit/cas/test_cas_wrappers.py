"""The verifying and two-level store wrappers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from rbs.cas.disk import DiskStore
from rbs.cas.errors import BlobNotFound, CorruptBlob
from rbs.cas.memory import MemoryStore
from rbs.cas.tree import materialize, tree_from_path
from rbs.cas.twolevel import TwoLevelStore
from rbs.cas.verify import VerifyingStore
from rbs.model import Digest


class CountingStore(MemoryStore):
    """A MemoryStore that records what it was asked, like a remote's RPC log."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Digest] = []
        self.opened: list[Digest] = []

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        digests = list(digests)
        self.asked.extend(digests)
        return super().find_missing(digests)

    def _open(self, digest: Digest):  # type: ignore[no-untyped-def]
        self.opened.append(digest)
        return super()._open(digest)


def test_verifying_store_refuses_and_deletes_corrupt_blobs(tmp_path: Path) -> None:
    inner = MemoryStore()
    store = VerifyingStore(inner)
    d = store.put(b"good bytes")
    inner._blobs[d] = b"evil bytes"  # the inner store went bad behind our back
    with pytest.raises(CorruptBlob, match=d.hash):
        store.get(d)
    assert store.find_missing([d]) == [d]
    inner._blobs[d2 := store.put(b"exported")] = b"EXPORTED"
    with pytest.raises(CorruptBlob):
        store.export_file(d2, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert not inner.contains(d2)


def test_verifying_store_catches_a_longer_blob() -> None:
    inner = MemoryStore()
    store = VerifyingStore(inner)
    d = store.put(b"1234")
    inner._blobs[d] = b"1234 and then some"
    with pytest.raises(CorruptBlob):
        store.get(d)


def test_two_level_reads_fetch_once_and_keep_a_local_copy(tmp_path: Path) -> None:
    local, remote = DiskStore(tmp_path / "local"), CountingStore()
    d = remote.put(b"from the server")
    store = TwoLevelStore(local, remote)
    assert store.get(d) == b"from the server"
    assert local.contains(d)
    assert store.get(d) == b"from the server"
    assert remote.opened == [d], "the second read is served locally"


def test_two_level_writes_go_through_to_the_remote(tmp_path: Path) -> None:
    local, remote = DiskStore(tmp_path / "local"), CountingStore()
    store = TwoLevelStore(local, remote)
    a = store.put(b"put")
    (tmp_path / "f").write_bytes(b"put_file")
    b = store.put_file(tmp_path / "f")
    c = Digest.of(b"writer")
    with store.writer(c) as w:
        w.write(b"writer")
        w.commit()
    for d in (a, b, c):
        assert local.contains(d) and remote.contains(d)


def test_two_level_find_missing_asks_remote_only_about_local_misses(tmp_path: Path) -> None:
    local, remote = DiskStore(tmp_path / "local"), CountingStore()
    store = TwoLevelStore(local, remote)
    here = local.put(b"local only")
    there = remote.put(b"remote only")
    nowhere = Digest.of(b"nowhere")
    assert store.find_missing([here, there, nowhere]) == [nowhere]
    assert remote.asked == [there, nowhere]


def test_two_level_tree_round_trip_through_remote(tmp_path: Path) -> None:
    remote = CountingStore()
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_bytes(b"file in a tree")
    root = tree_from_path(TwoLevelStore(DiskStore(tmp_path / "a"), remote), src)
    # Another worker with an empty local store materializes it from the remote.
    other = TwoLevelStore(DiskStore(tmp_path / "b"), remote)
    materialize(other, root, tmp_path / "out")
    assert (tmp_path / "out" / "d" / "f").read_bytes() == b"file in a tree"


def test_two_level_missing_everywhere(tmp_path: Path) -> None:
    store = TwoLevelStore(DiskStore(tmp_path / "local"), MemoryStore())
    with pytest.raises(BlobNotFound):
        store.get(Digest.of(b"nothing"))
    with pytest.raises(BlobNotFound):
        store.export_file(Digest.of(b"nothing"), tmp_path / "out")
