"""A durable put_file killed half-way leaves no blob under its name, only a temp file
that the next sweep removes; the same put then completes and reads back verified."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rbs.cas.disk import DiskStore
from rbs.cas.errors import DigestMismatch
from rbs.model import Digest

SIZE = 24 << 20  # above SMALL_FILE: the streaming copy-and-hash path, several chunks

# Puts FILE into the store at ROOT; after the first chunk is written it says so on
# stdout and waits, so the test kills it in the middle of the copy.
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from rbs.cas import fileio
    from rbs.cas.disk import DiskStore

    real = fileio.write_all
    def write_then_stop(fd, data):
        real(fd, data)
        print("written", flush=True)
        sys.stdin.read()  # until killed
    fileio.write_all = write_then_stop
    DiskStore(Path(sys.argv[1])).put_file(Path(sys.argv[2]))
    """
)


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


@pytest.fixture
def big(tmp_path: Path) -> Path:
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(SIZE))
    return path


def test_a_put_killed_mid_copy_leaves_no_blob_and_a_later_put_completes(
    tmp_path: Path, big: Path
) -> None:
    root = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), str(big)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "written"
    finally:
        child.kill()
        child.wait(60)
    store = DiskStore(root)
    digest = Digest.of(big.read_bytes())
    assert _files(root / "blobs") == []
    partial = _files(root / "tmp")
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < SIZE
    assert store.find_missing([digest]) == [digest]
    assert store.sweep_tmp(older_than=0) == 1
    assert _files(root / "tmp") == []
    assert store.put_file(big) == digest
    with store.open(digest) as f:
        assert f.read() == big.read_bytes()


def test_a_durable_put_file_is_fsynced_before_it_is_renamed(
    tmp_path: Path, big: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DiskStore(tmp_path / "store")
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(
        os,
        "rename",
        lambda a, b: (events.append(f"rename {Path(b).parent.parent.name}"), real_rename(a, b))[1],
    )
    digest = store.put_file(big)
    assert events == ["fsync", "rename blake3"]
    assert store.path_of(digest).stat().st_size == SIZE


def test_a_put_file_with_the_wrong_expected_digest_keeps_nothing(tmp_path: Path, big: Path) -> None:
    store = DiskStore(tmp_path / "store")
    wrong = Digest.of(b"other bytes of another size")
    wrong = Digest(function=wrong.function, hash=wrong.hash, size=SIZE)
    with pytest.raises(DigestMismatch):
        store.put_file(big, expected=wrong)
    assert _files(tmp_path / "store" / "blobs") == []
    assert _files(tmp_path / "store" / "tmp") == []
