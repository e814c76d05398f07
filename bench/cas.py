"""Content-addressed store benchmark: large-file put, tree_from_path, find_missing.

Prints medians of a few runs, with the machine's load average:
  (a) a durable DiskStore.put_file of a 1 GiB file, against single-thread BLAKE3 of
      the same file and an fsync'd sequential copy of it to the store's disk, both
      measured in the same run; goal: put_file at >= 0.8 x the slower of the two;
  (b) tree_from_path + store of 20,000 files of 4 KiB, in files per second;
  (c) find_missing of 100,000 digests (half present) against a store of 1,000,000
      blobs, with and without the FindMissing index (DiskStore(index=True)); goal
      <= 0.2 s. The store is filled through a non-durable batch first (timed apart).

Usage: python bench/cas.py [--dir DIR] [--runs N] [--big-mib N] [--files N]
                           [--digests N] [--store-blobs N] [--only a,b,c]
The work folder (default: a new folder under the system temp dir) is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import blake3

from rbs.cas.disk import DiskStore
from rbs.cas.tree import tree_from_path
from rbs.model import Digest


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def hash_file(path: Path, threads: bool) -> str:
    h = blake3.blake3(max_threads=blake3.blake3.AUTO if threads else 1)
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(8 << 20)
        view = memoryview(buf)
        while n := f.readinto(view):
            h.update(view[:n])
    return str(h.hexdigest())


def write_fsync(src: Path, dst: Path) -> None:
    """A sequential write of `src`'s bytes (from the page cache) to `dst`, then fsync."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with open(src, "rb", buffering=0) as f:
            buf = bytearray(8 << 20)
            view = memoryview(buf)
            while n := f.readinto(view):
                os.write(fd, view[:n])
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_big(work: Path, runs: int, mib: int) -> None:
    src = work / "big.bin"
    with open(src, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    os.sync()  # the file is on disk before anything is timed, as a user's file would be
    hash_file(src, threads=True)  # warm the page cache
    hash_mt, hash_1t, copy, store = [], [], [], []
    for i in range(runs):
        hash_mt.append(timed(lambda: hash_file(src, threads=True)))
        hash_1t.append(timed(lambda: hash_file(src, threads=False)))
        copy.append(timed(lambda i=i: write_fsync(src, work / f"copy-{i}")))  # type: ignore[misc]
        os.unlink(work / f"copy-{i}")
        os.sync()
        s = DiskStore(work / f"big-store-{i}")
        store.append(timed(lambda s=s: s.put_file(src)))  # type: ignore[misc]
        shutil.rmtree(work / f"big-store-{i}")
        os.sync()  # settle writeback so the next run starts from the same state
    mt, one, cp, st = (statistics.median(x) for x in (hash_mt, hash_1t, copy, store))
    gib = mib / 1024
    floor = max(one, cp)  # the slower of the two, in seconds
    print(f"(a) durable put_file of a {mib} MiB file (median of {runs}; load {load()}):")
    print(f"    blake3 hash, all cores       {mt:.3f} s  {gib / mt:.2f} GiB/s")
    print(f"    blake3 hash, one thread      {one:.3f} s  {gib / one:.2f} GiB/s")
    print(f"    sequential write + fsync     {cp:.3f} s  {gib / cp:.2f} GiB/s")
    print(f"    DiskStore.put_file           {st:.3f} s  {gib / st:.2f} GiB/s (hash+copy+fsync)")
    print(f"    put_file / min(one-thread blake3, write+fsync)   {floor / st:.2f}  (goal >= 0.8)")
    print(f"    runs: put_file {fmt(store)}; write+fsync {fmt(copy)}; blake3 1t {fmt(hash_1t)}")


def fmt(values: list[float]) -> str:
    return " ".join(f"{v:.2f}" for v in values) + " s"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def bench_tree(work: Path, runs: int, files: int) -> DiskStore:
    src = work / "tree"
    for i in range(files):
        d = src / f"d{i // 200:03d}"
        if i % 200 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:05d}").write_bytes(os.urandom(4096))
    os.sync()
    fresh, again = [], []
    store = DiskStore(work / "tree-store-0")
    for i in range(runs):
        store = DiskStore(work / f"tree-store-{i}")
        fresh.append(timed(lambda store=store: tree_from_path(store, src)))  # type: ignore[misc]
        again.append(timed(lambda store=store: tree_from_path(store, src)))  # type: ignore[misc]
    f, a = statistics.median(fresh), statistics.median(again)
    print(f"(b) tree_from_path of {files} files of 4 KiB (median of {runs}):")
    print(f"    into an empty store        {f:.3f} s  {files / f:,.0f} files/s  (goal >= 10,000)")
    print(f"    all blobs already present  {a:.3f} s  {files / a:,.0f} files/s")
    return store


def blob(i: int) -> bytes:
    return i.to_bytes(8, "little")


def fill(root: Path, n: int) -> list[Digest]:
    """A store of `n` blobs of 8 bytes, written through non-durable batches."""
    store = DiskStore(root, durable=False)
    t = time.perf_counter()
    digests: list[Digest] = []
    for start in range(0, n, 50_000):
        with store.batch() as b:
            digests.extend(b.put(blob(i)) for i in range(start, min(n, start + 50_000)))
    took = time.perf_counter() - t
    print(f"    filled a store of {n:,} blobs in {took:.1f} s ({n / took:,.0f} blobs/s)")
    return digests


def bench_find_missing(work: Path, runs: int, n: int, store_blobs: int) -> None:
    print(f"(c) find_missing of {n:,} digests, half present, against {store_blobs:,} blobs:")
    root = work / "fm-store"
    stored = fill(root, store_blobs)
    step = max(1, len(stored) // (n // 2))
    present = stored[::step][: n // 2]
    absent = [Digest.of(b"absent %d" % i) for i in range(n - len(present))]
    query = [d for pair in zip(present, absent, strict=False) for d in pair]

    def call(store: DiskStore) -> tuple[float, float]:
        """(wall s, CPU s of this process) of one find_missing of the query."""
        wall, cpu = time.perf_counter(), time.process_time()
        assert store.find_missing(query) == absent
        return time.perf_counter() - wall, time.process_time() - cpu

    def median2(values: list[tuple[float, float]]) -> str:
        walls, cpus = zip(*values, strict=True)
        return f"{statistics.median(walls):.3f} s wall  {statistics.median(cpus):.3f} s CPU"

    plain = DiskStore(root)
    plain_runs = [call(plain) for _ in range(runs)]
    first = DiskStore(root, index=True)
    first_run = call(first)
    # Shards read (by a query of absent digests only), nothing seen within the minute:
    # every present digest is confirmed with a stat.
    cold = []
    for _ in range(runs):
        s = DiskStore(root, index=True)
        s.find_missing(absent)
        cold.append(call(s))
    again = [call(first) for _ in range(runs)]
    bitmaps = first.index.bitmap_bytes() if first.index is not None else 0
    print(f"    (median of {runs}; load {load()})")
    print(f"    no index: one stat per digest             {median2(plain_runs)}")
    print(f"    index, first call (reads every shard)     {median2([first_run])}")
    print(f"    index, present blobs not seen this minute {median2(cold)}")
    print(f"    index, the same query again               {median2(again)}  (goal <= 0.2 s)")
    print(f"    index memory: {bitmaps / 2**20:.1f} MiB of bitmaps for {store_blobs:,} blobs")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, default=None, help="work folder parent")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--big-mib", type=int, default=1024)
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--digests", type=int, default=100_000)
    p.add_argument("--store-blobs", type=int, default=1_000_000)
    p.add_argument("--only", default="a,b,c", help="which parts to run, e.g. a,c")
    args = p.parse_args()
    parts = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="rbs-bench-cas-", dir=args.dir))
    print(f"rbs cas benchmark in {work} ({os.cpu_count()} cpus, load {load()})")
    try:
        if "a" in parts:
            bench_big(work, args.runs, args.big_mib)
        if "b" in parts:
            bench_tree(work, args.runs, args.files)
        if "c" in parts:
            bench_find_missing(work, args.runs, args.digests, args.store_blobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
