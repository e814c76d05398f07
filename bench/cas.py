"""Content-addressed store benchmark: large-file put, tree_from_path, find_missing.

Prints medians of a few runs:
  (a) storing a 1 GiB file with DiskStore.put_file, as a ratio of the throughput of
      plain blake3 hashing of the same file (read from the page cache) in the same run;
  (b) tree_from_path + store of 20,000 files of 4 KiB, in files per second;
  (c) find_missing over 100,000 digests (half present), in seconds.

Usage: python bench/cas.py [--dir DIR] [--runs N] [--big-mib N] [--files N]
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


def copy_fsync(src: Path, dst: Path) -> None:
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    try:
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
        copy.append(timed(lambda i=i: copy_fsync(src, work / f"copy-{i}")))  # type: ignore[misc]
        os.sync()
        s = DiskStore(work / f"big-store-{i}")
        store.append(timed(lambda s=s: s.put_file(src)))  # type: ignore[misc]
        os.sync()  # settle writeback so the next run starts from the same state
    mt, one, cp, st = (statistics.median(x) for x in (hash_mt, hash_1t, copy, store))
    gib = mib / 1024
    print(f"(a) put_file of a {mib} MiB file (median of {runs}):")
    print(f"    blake3 hash, all cores     {mt:.3f} s  {gib / mt:.2f} GiB/s")
    print(f"    blake3 hash, one thread    {one:.3f} s  {gib / one:.2f} GiB/s")
    print(f"    plain copy + fsync         {cp:.3f} s  {gib / cp:.2f} GiB/s (the I/O floor)")
    print(f"    DiskStore.put_file         {st:.3f} s  {gib / st:.2f} GiB/s (hash+copy+fsync)")
    print(f"    ratio to hashing, all cores   {mt / st:.2f}  (goal >= 0.6)")
    print(f"    ratio to hashing, one thread  {one / st:.2f}")
    print(f"    ratio to plain copy + fsync   {cp / st:.2f}")


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


def bench_find_missing(work: Path, runs: int, n: int) -> None:
    store = DiskStore(work / "fm-store")
    with store.batch() as b:
        present = [b.put(i.to_bytes(8, "little")) for i in range(n // 2)]
    absent = [Digest.of(b"absent %d" % i) for i in range(n - len(present))]
    query = [d for pair in zip(present, absent, strict=True) for d in pair]
    times = []
    for _ in range(runs):
        times.append(timed(lambda: store.find_missing(query)))
    assert store.find_missing(query) == absent
    t = statistics.median(times)
    print(f"(c) find_missing over {len(query):,} digests, half present (median of {runs}):")
    print(f"    {t:.3f} s  {len(query) / t:,.0f} digests/s  (goal < 0.5 s)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, default=None, help="work folder parent")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--big-mib", type=int, default=1024)
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--digests", type=int, default=100_000)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rbs-bench-cas-", dir=args.dir))
    print(f"rbs cas benchmark in {work} ({os.cpu_count()} cpus)")
    try:
        bench_big(work, args.runs, args.big_mib)
        bench_tree(work, args.runs, args.files)
        bench_find_missing(work, args.runs, args.digests)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
