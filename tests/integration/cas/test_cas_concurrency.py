"""Several processes writing the same large blob into one disk store at once."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from rbs.cas.disk import DiskStore
from rbs.cas.store import hash_file
from rbs.model import Digest

WRITERS = 4


def _put_file(root: str, src: str, barrier: object) -> str:
    store = DiskStore(Path(root))
    barrier.wait()  # type: ignore[attr-defined]
    return str(store.put_file(Path(src)))


def _stream(root: str, src: str, digest: str, barrier: object) -> str:
    store = DiskStore(Path(root))
    d = Digest.parse(digest)
    barrier.wait()  # type: ignore[attr-defined]
    with store.writer(d) as w, open(src, "rb") as f:
        while chunk := f.read(1 << 20):
            w.write(chunk)
        return str(w.commit())


def test_concurrent_writers_of_one_blob(tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    with open(src, "wb") as f:
        for _ in range(48):
            f.write(os.urandom(1 << 20))
    expected = hash_file(src)
    root = tmp_path / "store"
    DiskStore(root)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(WRITERS)
        with ctx.Pool(WRITERS) as pool:
            jobs = [
                pool.apply_async(_put_file, (str(root), str(src), barrier))
                if i % 2
                else pool.apply_async(_stream, (str(root), str(src), str(expected), barrier))
                for i in range(WRITERS)
            ]
            results = [j.get(timeout=90) for j in jobs]
    assert results == [str(expected)] * WRITERS
    store = DiskStore(root)
    assert hash_file(store.path_of(expected)) == expected
    assert store.get(expected) == src.read_bytes()
    assert list(store.tmp_dir.iterdir()) == [], "no temp files remain"
    assert store.stat().blobs == 1
