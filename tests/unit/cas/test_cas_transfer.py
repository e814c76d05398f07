"""The local store's puts and gets report every byte they move to rbs.cas.transfer."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rbs.cas import transfer
from rbs.cas.disk import SMALL_FILE, DiskStore
from rbs.cas.memory import MemoryStore
from rbs.cas.tree import materialize, tree_from_path


class Recorder:
    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.steps = 0
        self._lock = threading.Lock()  # tree_from_path reports from its pool threads

    def expect(self, nbytes: int) -> None:
        with self._lock:
            self.total += nbytes

    def advance(self, nbytes: int) -> None:
        with self._lock:
            self.done += nbytes
            self.steps += 1


def test_a_big_file_put_advances_chunk_by_chunk(tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(3 * SMALL_FILE))
    rec = Recorder()
    with transfer.reporting(rec):
        DiskStore(tmp_path / "cas").put_file(src)
    assert rec.done == src.stat().st_size
    assert rec.steps > 1  # a bar moves during the file, not only at its end


@pytest.mark.parametrize("files", [3, 100])  # serial, and on the tree's thread pool
def test_a_tree_put_expects_its_bytes_first_and_reports_them_all(
    tmp_path: Path, files: int
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    sizes = [(i * 7919) % 20000 for i in range(files)]
    for i, n in enumerate(sizes):
        (src / ("sub" if i % 2 else "") / f"f{i}").write_bytes(os.urandom(n))
    (src / "big.bin").write_bytes(os.urandom(SMALL_FILE + 1))  # through put_file's copy
    os.symlink("f0", src / "link")
    want = sum(sizes) + SMALL_FILE + 1
    rec = Recorder()
    with transfer.reporting(rec):
        tree_from_path(DiskStore(tmp_path / "cas"), src)
    assert rec.total == rec.done == want


@pytest.mark.parametrize("link", [True, False])
def test_materialize_reports_the_tree_s_file_bytes(tmp_path: Path, link: bool) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(os.urandom(5000))
    (src / "b").write_bytes(os.urandom(SMALL_FILE + 10))
    store = DiskStore(tmp_path / "cas")
    root = tree_from_path(store, src)
    rec = Recorder()
    with transfer.reporting(rec):
        materialize(store, root, tmp_path / "out", link=link)
    assert rec.total == rec.done == 5000 + SMALL_FILE + 10
    assert (tmp_path / "out" / "b").read_bytes() == (src / "b").read_bytes()


def test_reporting_none_silences_a_step_inside_a_reported_transfer(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"x" * 1000)
    store = MemoryStore()
    root = tree_from_path(store, src)
    rec = Recorder()
    with transfer.reporting(rec):
        with transfer.reporting(None):
            materialize(store, root, tmp_path / "out", link=False)
        transfer.advance(7)
    assert (rec.total, rec.done) == (0, 7)
    assert transfer.listening() is None
