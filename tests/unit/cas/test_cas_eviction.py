"""Size-bounded LRU eviction with a lease, and the use tracking it relies on."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rbs.cas import eviction
from rbs.cas.disk import DiskStore
from rbs.cas.eviction import TOUCH_INTERVAL
from rbs.model import Digest

HOUR = 3600.0


def _age(store: DiskStore, d: Digest, seconds: float) -> None:
    """Pretend `d` was last used `seconds` ago."""
    t = time.time() - seconds
    os.utime(store.path_of(d), (t, t))


def _blobs(store: DiskStore, n: int, size: int = 1000) -> list[Digest]:
    return [store.put(bytes([i]) * size) for i in range(n)]


def test_gc_evicts_least_recently_used_first(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", lease=HOUR)
    ds = _blobs(store, 5)
    for i, d in enumerate(ds):
        _age(store, d, 10 * HOUR - i * 60)  # ds[0] is the oldest
    r = store.gc(2500)
    assert r.removed_blobs == 3 and r.after_bytes == 2000 and r.before_bytes == 5000
    assert store.find_missing(ds) == ds[:3]


def test_gc_never_evicts_within_the_lease(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", lease=3 * HOUR)
    old, recent = _blobs(store, 2)
    _age(store, old, 4 * HOUR)
    _age(store, recent, 2.5 * HOUR)
    r = store.gc(0)
    assert r.removed_blobs == 1 and r.over_target
    assert r.leased_bytes == 1000
    assert store.find_missing([old, recent]) == [old]


def test_lease_covers_the_touch_throttle(tmp_path: Path) -> None:
    """A use refreshes mtime at most every TOUCH_INTERVAL; gc must not count a blob
    used just now, whose mtime is up to that old, as out of its lease."""
    store = DiskStore(tmp_path / "s", lease=HOUR)
    (d,) = _blobs(store, 1)
    _age(store, d, HOUR + TOUCH_INTERVAL / 2)
    assert store.gc(0).removed_blobs == 0


@pytest.mark.parametrize(
    "use",
    [
        lambda s, d, p: s.contains(d),
        lambda s, d, p: s.find_missing([d]),
        lambda s, d, p: s.get(d),
        lambda s, d, p: s.export_file(d, p / "out"),
        lambda s, d, p: s.put(bytes([0]) * 1000),
    ],
    ids=["contains", "find_missing", "get", "export_file", "put"],
)
def test_every_use_renews_the_lease(tmp_path: Path, use: object) -> None:
    store = DiskStore(tmp_path / "s", lease=HOUR)
    (d,) = _blobs(store, 1)
    _age(store, d, 2 * HOUR)
    use(store, d, tmp_path)  # type: ignore[operator]
    assert store.gc(0).removed_blobs == 0
    assert store.contains(d)


def test_lease_holds_across_store_instances(tmp_path: Path) -> None:
    """A worker and a CLI share a store folder: one's use protects from the other's gc."""
    worker = DiskStore(tmp_path / "s", lease=HOUR)
    (d,) = _blobs(worker, 1)
    _age(worker, d, 2 * HOUR)
    cli = DiskStore(tmp_path / "s", lease=HOUR)
    assert worker.find_missing([d]) == []
    assert cli.gc(0).removed_blobs == 0


def test_gc_puts_back_a_blob_used_while_it_was_being_evicted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path / "s", lease=HOUR)
    (d,) = _blobs(store, 1)
    _age(store, d, 2 * HOUR)
    real_rename = os.rename

    def rename_then_use(src: str, dst: str) -> None:
        # Another process uses the blob just before gc moves it aside.
        if src == str(store.path_of(d)):
            os.utime(src)
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename_then_use)
    r = store.gc(0)
    monkeypatch.undo()
    assert r.removed_blobs == 0
    assert store.get(d) == bytes([0]) * 1000
    assert [p.name for p in store.tmp_dir.iterdir()] == []


def test_gc_removes_executable_twins_with_their_blob(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", lease=HOUR)
    (d,) = _blobs(store, 1)
    store.export_file(d, tmp_path / "x", executable=True)
    assert store.stat().total_bytes == 2000
    for p in store.root.rglob(d.hash):
        t = time.time() - 2 * HOUR
        os.utime(p, (t, t))
    r = store.gc(0)
    assert r.removed_bytes == 2000 and r.after_bytes == 0
    assert not list(store.root.rglob(d.hash))
    assert (tmp_path / "x").read_bytes() == bytes([0]) * 1000, "exported copies survive"


def test_max_size_triggers_eviction_on_write(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s", max_size=10_000, lease=HOUR)
    old = _blobs(store, 8)
    for d in old:
        _age(store, d, 2 * HOUR)
    new = [store.put(b"n" * 1000 + bytes([i])) for i in range(4)]
    assert store.stat().total_bytes <= 10_000
    assert store.find_missing(new) == []
    assert len(store.find_missing(old)) >= 2


def test_gc_sweeps_stale_temp_files_only(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s")
    (store.tmp_dir / "crashed").write_bytes(b"x")
    os.utime(store.tmp_dir / "crashed", (1, 1))
    (store.tmp_dir / "uploading").write_bytes(b"y")
    r = store.gc(None)
    assert r.temp_removed == 1
    assert [p.name for p in store.tmp_dir.iterdir()] == ["uploading"]


def test_stat_counts_blobs_per_function(tmp_path: Path) -> None:
    from rbs.model import DigestFunction

    store = DiskStore(tmp_path / "s", lease=HOUR)
    a = store.put(b"a" * 10)
    store.put(b"b" * 20, function=DigestFunction.SHA256)
    _age(store, a, 2 * HOUR)
    s = store.stat()
    assert (s.blobs, s.total_bytes, s.leased_blobs, s.leased_bytes) == (2, 30, 1, 20)
    assert {(f.function, f.blobs, f.bytes) for f in s.by_function} == {
        (DigestFunction.BLAKE3, 1, 10),
        (DigestFunction.SHA256, 1, 20),
    }
    assert eviction.stat(store).blobs == 2


def test_invalid_bounds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_size"):
        DiskStore(tmp_path / "s", max_size=-1)
    with pytest.raises(ValueError, match="lease"):
        DiskStore(tmp_path / "s", lease=-5)
