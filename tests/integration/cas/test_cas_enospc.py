"""A store on a real, tiny file system that fills up (tmpfs; needs root to mount)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rbs.cas.disk import DiskStore
from rbs.cas.errors import StoreFull
from rbs.cas.tree import tree_from_path
from rbs.model import Digest

pytestmark = pytest.mark.chaos


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a 2 MiB tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True, timeout=30)


def test_full_disk_names_the_store_and_leaves_it_consistent(tiny_fs: Path, tmp_path: Path) -> None:
    store = DiskStore(tiny_fs / "store")
    kept = store.put(b"stored before the disk filled")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 << 20))
    with pytest.raises(StoreFull) as e:
        store.put_file(big)
    assert str(store.root) in str(e.value) and "rbs cas gc" in str(e.value)
    assert list(store.tmp_dir.iterdir()) == [], "nothing partial is left"
    with pytest.raises(StoreFull):
        store.put(os.urandom(3 << 20))
    assert list(store.tmp_dir.iterdir()) == []
    assert store.get(kept) == b"stored before the disk filled"
    assert store.stat().blobs == 1
    # Space is usable again right away: nothing leaked.
    assert store.get(store.put(os.urandom(1 << 20))) is not None


def test_full_disk_during_a_tree_batch(tiny_fs: Path, tmp_path: Path) -> None:
    store = DiskStore(tiny_fs / "store")
    src = tmp_path / "src"
    src.mkdir()
    for i in range(40):
        (src / f"f{i}").write_bytes(os.urandom(100_000))
    with pytest.raises(StoreFull, match=re.escape(str(store.root))):
        tree_from_path(store, src)
    assert list(store.tmp_dir.iterdir()) == []
    for p in store.blob_dir.rglob("*"):
        if p.is_file():
            assert Digest.of(p.read_bytes()).hash == p.name, "every blob present is whole"
