"""The disk store: layout, crash-safe writes, corruption handling, full disks, memory use."""

from __future__ import annotations

import errno
import os
import re
import tracemalloc
from pathlib import Path

import pytest

from rbs.cas import diskbatch, fileio
from rbs.cas.disk import DiskStore
from rbs.cas.errors import BlobNotFound, CorruptBlob, StoreFull
from rbs.model import Digest, DigestFunction


def _corrupt(path: Path, data: bytes) -> None:
    os.chmod(path, 0o644)
    path.write_bytes(data)


def test_layout_is_sharded_by_function_and_hash_prefix(disk: DiskStore) -> None:
    d = disk.put(b"abc", function=DigestFunction.SHA256)
    path = disk.root / "blobs" / "sha256" / d.hash[:2] / d.hash
    assert disk.path_of(d) == path
    assert path.read_bytes() == b"abc"
    assert path.stat().st_mode & 0o777 == 0o444
    assert list(disk.tmp_dir.iterdir()) == []


def test_corrupt_blob_is_reported_removed_and_never_served(disk: DiskStore) -> None:
    d = disk.put(b"precious bytes")
    _corrupt(disk.path_of(d), b"precious BYTES")  # same size, different content
    with pytest.raises(CorruptBlob) as e:
        disk.get(d)
    assert d.hash in str(e.value) and str(disk.path_of(d)) in str(e.value)
    assert not disk.path_of(d).exists()
    assert disk.find_missing([d]) == [d]
    with pytest.raises(BlobNotFound):
        disk.get(d)
    # Uploading it again repairs the store.
    assert disk.put(b"precious bytes") == d
    assert disk.get(d) == b"precious bytes"


def test_truncated_blob_is_found_by_find_missing(disk: DiskStore) -> None:
    d = disk.put(b"0123456789")
    _corrupt(disk.path_of(d), b"01234")
    assert disk.find_missing([d]) == [d]
    assert not disk.path_of(d).exists()


def test_truncated_blob_is_refused_on_open(disk: DiskStore) -> None:
    d = disk.put(b"0123456789")
    _corrupt(disk.path_of(d), b"0123456789 and more")
    with pytest.raises(CorruptBlob):
        disk.open(d)
    assert not disk.contains(d)


def test_tampering_through_a_hardlink_is_caught_before_the_next_link(
    disk: DiskStore, tmp_path: Path
) -> None:
    d = disk.put(b"input file")
    disk.export_file(d, tmp_path / "first", link=True)
    assert os.path.samefile(tmp_path / "first", disk.path_of(d))
    # A job running as root ignores the read-only mode and writes its input.
    _corrupt(tmp_path / "first", b"INPUT FILE")
    with pytest.raises(CorruptBlob):
        disk.export_file(d, tmp_path / "second", link=True)
    assert not (tmp_path / "second").exists()
    assert disk.find_missing([d]) == [d]


def test_tampered_executable_twin_is_remade_from_the_blob(disk: DiskStore, tmp_path: Path) -> None:
    d = disk.put(b"#!/bin/sh\n")
    disk.export_file(d, tmp_path / "a", executable=True)
    _corrupt(tmp_path / "a", b"#!/bin/XX\n")
    disk.export_file(d, tmp_path / "b", executable=True)
    assert (tmp_path / "b").read_bytes() == b"#!/bin/sh\n"
    assert (tmp_path / "b").stat().st_mode & 0o777 == 0o555
    assert disk.get(d) == b"#!/bin/sh\n"


def test_export_falls_back_to_copy_across_devices(
    disk: DiskStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = disk.put(b"data")

    def no_link(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    disk.export_file(d, tmp_path / "out", link=True)
    assert (tmp_path / "out").read_bytes() == b"data"
    assert not os.path.samefile(tmp_path / "out", disk.path_of(d))


def test_put_file_streams_in_constant_memory(disk: DiskStore, tmp_path: Path) -> None:
    src = tmp_path / "big"
    with open(src, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(1 << 20))
    tracemalloc.start()
    try:
        d = disk.put_file(src)
        with disk.open(d) as r:
            while r.read(1 << 20):
                pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert d.size == 64 << 20
    assert peak < 24 << 20, f"put_file + read used {peak >> 20} MiB for a 64 MiB file"


def _enospc(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_enospc_while_writing_names_the_store_and_leaves_nothing(
    disk: DiskStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fileio, "write_all", _enospc)
    src = tmp_path / "big"
    src.write_bytes(os.urandom(5 << 20))
    for attempt in (lambda: disk.put(b"small blob"), lambda: disk.put_file(src)):
        with pytest.raises(StoreFull, match=re.escape(str(disk.root))):
            attempt()
    assert list(disk.tmp_dir.iterdir()) == []
    assert disk.find_missing([Digest.of(b"small blob")]) == [Digest.of(b"small blob")]


def test_enospc_at_fsync_leaves_nothing(disk: DiskStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(StoreFull, match="no space left"):
        disk.put(b"blob")
    assert list(disk.tmp_dir.iterdir()) == []
    assert not disk.contains(Digest.of(b"blob"))


def test_enospc_in_a_batch_discards_the_whole_group(
    disk: DiskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fileio, "syncfs", _enospc)
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(StoreFull), disk.batch() as b:
        for i in range(10):
            b.put(f"blob {i}".encode())
    assert list(disk.tmp_dir.iterdir()) == []
    assert disk.stat().blobs == 0


@pytest.mark.parametrize("syncfs", [True, False])
def test_batch_makes_blobs_durable_before_renaming(
    disk: DiskStore, monkeypatch: pytest.MonkeyPatch, syncfs: bool
) -> None:
    """Crash safety: no blob may appear under its name before its group was synced."""
    monkeypatch.setattr(fileio, "HAVE_SYNCFS", syncfs and fileio.HAVE_SYNCFS)
    monkeypatch.setattr(diskbatch, "GROUP_SYNCFS", 50)
    monkeypatch.setattr(diskbatch, "GROUP_FSYNC", 50)
    synced: set[str] = set()
    visible_at_sync: list[int] = []
    real_fsync, real_syncfs = os.fsync, fileio.syncfs

    def record_syncfs(path: str) -> None:
        visible_at_sync.append(disk.stat().blobs)
        synced.update(os.listdir(disk.tmp_dir))
        real_syncfs(path)

    def record_fsync(fd: int) -> None:
        synced.add(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(fileio, "syncfs", record_syncfs)
    monkeypatch.setattr(os, "fsync", record_fsync)
    real_rename = os.rename

    def checked_rename(src: str, dst: str) -> None:
        assert os.path.basename(src) in synced, f"{src} renamed before it was synced"
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", checked_rename)
    with disk.batch() as b:
        digests = [b.put(f"blob {i}".encode()) for i in range(120)]
    monkeypatch.undo()
    assert disk.find_missing(digests) == []
    assert list(disk.tmp_dir.iterdir()) == []
    if syncfs and fileio.HAVE_SYNCFS:
        assert visible_at_sync == [0, 50, 100]


def test_store_root_on_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match="file"):
        DiskStore(blocker / "store")


def test_sweep_tmp_keeps_fresh_uploads(disk: DiskStore) -> None:
    stale = disk.tmp_dir / "stale"
    fresh = disk.tmp_dir / "fresh"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(stale, (1, 1))
    assert disk.sweep_tmp() == 1
    assert fresh.exists() and not stale.exists()


def test_abandoned_writer_leaves_no_temp_file(disk: DiskStore) -> None:
    import gc

    w = disk.writer(Digest.of(b"never finished"))
    w.write(b"never")
    assert len(list(disk.tmp_dir.iterdir())) == 1
    del w
    gc.collect()
    assert list(disk.tmp_dir.iterdir()) == []


def test_asking_with_a_wrong_size_never_removes_a_good_blob(
    disk: DiskStore, tmp_path: Path
) -> None:
    """A digest names its size; a client that gives another one asks for a blob the store
    cannot have. It is missing, and the good blob stays (only a file whose bytes do not
    hash to its name is removed)."""
    d = disk.put(b"0123456789")
    for size in (d.size - 1, d.size + 1, 0x7FFF_FFFF):
        other = Digest(hash=d.hash, size=size, function=d.function)
        assert disk.check_missing([other]) == [other]
        assert disk.find_missing([other]) == [other]
        assert not disk.contains(other)
        with pytest.raises(BlobNotFound):
            disk.open(other)
        with pytest.raises(BlobNotFound):
            disk.export_file(other, tmp_path / f"out-{size}", link=True)
        assert disk.path_of(d).exists()
    assert disk.find_missing([d]) == []
    assert disk.get(d) == b"0123456789"


def test_a_cut_file_asked_with_another_size_is_still_removed(disk: DiskStore) -> None:
    d = disk.put(b"0123456789")
    _corrupt(disk.path_of(d), b"01234")
    other = Digest(hash=d.hash, size=7, function=d.function)
    assert disk.check_missing([other]) == [other]
    assert not disk.path_of(d).exists()
