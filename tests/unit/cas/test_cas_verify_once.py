"""Reads are verified before the first byte, once per blob file, and `scrub` re-checks all."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rbs.cas import fileio
from rbs.cas.disk import DiskStore
from rbs.cas.errors import CorruptBlob
from rbs.cas.scrub import scrub
from rbs.model import Digest

LARGE = (3 << 20) + 17  # above the size read whole into memory


def flip_byte(path: Path, at: int = 0) -> None:
    """Corrupt a blob file in place (same inode and size, one byte changed)."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    os.chmod(path, 0o444)


def payload(n: int) -> bytes:
    return (b"0123456789abcdef" * (n // 16 + 1))[:n]


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[Digest | None]:
    """Counts whole-file hashes made by the disk store (one entry per hash)."""
    calls: list[Digest | None] = []
    real: Callable[..., Any] = fileio.hash_fd

    def counting(fd: int, *args: Any, **kw: Any) -> Any:
        calls.append(None)
        return real(fd, *args, **kw)

    monkeypatch.setattr(fileio, "hash_fd", counting)
    return calls


@pytest.mark.parametrize("size", [100, LARGE])
def test_corrupt_blob_fails_open_before_any_byte_and_is_removed(tmp_path: Path, size: int) -> None:
    store = DiskStore(tmp_path / "s")
    d = store.put(payload(size))
    flip_byte(store.path_of(d), at=size - 1)  # the last byte: a streamed check is too late
    with pytest.raises(CorruptBlob) as e:
        store.open(d)
    assert str(d) in str(e.value) and "removed" in str(e.value)
    assert not store.path_of(d).exists()
    assert store.find_missing([d]) == [d]


def test_read_at_an_offset_verifies_the_whole_blob_first(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s")
    d = store.put(payload(LARGE))
    flip_byte(store.path_of(d), at=0)  # before the offset read
    with pytest.raises(CorruptBlob):
        next(store.read_chunks(d, offset=LARGE - 10))
    assert not store.path_of(d).exists()


@pytest.mark.parametrize("size", [100, LARGE])
def test_a_verified_blob_is_not_hashed_again(
    tmp_path: Path, hashes: list[Digest | None], size: int
) -> None:
    data = payload(size)
    d = DiskStore(tmp_path / "s").put(data)
    store = DiskStore(tmp_path / "s")  # a fresh process's view: nothing known yet
    assert store.get(d) == data
    assert len(hashes) == 1
    assert store.get(d) == data
    assert b"".join(store.read_chunks(d, offset=5)) == data[5:]
    assert len(hashes) == 1


def test_bytes_written_by_this_store_need_no_hash_to_be_read(
    tmp_path: Path, hashes: list[Digest | None]
) -> None:
    store = DiskStore(tmp_path / "s")
    d = store.put(payload(LARGE))
    assert store.get(d) == payload(LARGE)
    assert hashes == []


def test_a_new_inode_or_mtime_is_verified_again(
    tmp_path: Path, hashes: list[Digest | None]
) -> None:
    data = payload(LARGE)
    store = DiskStore(tmp_path / "s")
    d = store.put(data)
    path = store.path_of(d)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 1_000_000_000))
    assert store.get(d) == data
    assert len(hashes) == 1
    copy = tmp_path / "copy"
    shutil.copyfile(path, copy)
    os.replace(copy, path)  # same bytes, new inode
    assert store.get(d) == data
    assert len(hashes) == 2
    # Tampering that changes mtime is caught at the next read.
    flip_byte(path, at=LARGE // 2)
    with pytest.raises(CorruptBlob):
        store.get(d)
    assert len(hashes) == 3


def test_export_copy_of_a_corrupt_blob_leaves_no_file(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s")
    d = store.put(payload(LARGE))
    flip_byte(store.path_of(d))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(CorruptBlob):
        store.export_file(d, out / "f", link=False)
    assert list(out.iterdir()) == []


def test_export_copy_refuses_an_existing_file_and_leaves_no_temp(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "s")
    d = store.put(b"new")
    (tmp_path / "f").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        store.export_file(d, tmp_path / "f", link=False)
    assert (tmp_path / "f").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "s"]


def test_scrub_rehashes_every_blob_and_removes_the_corrupt_ones(
    tmp_path: Path, hashes: list[Digest | None]
) -> None:
    store = DiskStore(tmp_path / "s")
    good = [store.put(payload(n)) for n in (10, 20, LARGE)]
    bad = store.put(payload(30))
    flip_byte(store.path_of(bad))
    # Corrupted without changing mtime: only a scrub finds it.
    wrong_size = store.put(payload(40))
    st = store.path_of(wrong_size).stat()
    os.chmod(store.path_of(wrong_size), 0o644)
    with open(store.path_of(wrong_size), "ab") as f:
        f.write(b"x")
    os.utime(store.path_of(wrong_size), ns=(st.st_atime_ns, st.st_mtime_ns))
    result = scrub(store)
    assert (result.checked, result.ok, result.removed) == (5, 3, 2)
    assert sorted(d.hash for d in result.corrupt) == sorted([bad.hash, wrong_size.hash])
    assert len(hashes) >= 4  # every blob of the right size was hashed, known or not
    assert store.find_missing([*good, bad, wrong_size]) == [bad, wrong_size]
    assert scrub(store).removed == 0
