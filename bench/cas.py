"""Content-addressed store benchmark: large-file put, tree_from_path, find_missing.

Prints medians of a few runs, with the machine's load average:
  (a) a durable DiskStore.put_file of a 1 GiB file, against single-thread BLAKE3 of
      the same file and an fsync'd sequential copy of it to the store's disk, both
      measured in the same run; goal: put_file at >= 0.8 x the slower of the two;
  (b) tree_from_path + store of 20,000 files of 4 KiB, in files per second;
  (c) find_missing of 100,000 digests (half present) against stores of 10,000 to
      1,000,000 blobs, with and without the FindMissing index (DiskStore(index=True)),
      cold (restarted, present blobs last used 2 h ago) and warm; goal <= 0.2 s at
      1,000,000. The store is filled through non-durable batches (timed apart).

Usage: python bench/cas.py [--dir DIR] [--runs N] [--big-mib N] [--files N]
                           [--digests N] [--store-blobs N,N,...] [--only a,b,c]
The work folder (default: a new folder under the system temp dir) is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.digests import digest_to_pb, function_to_pb
from rbs.cas.disk import DiskStore
from rbs.cas.tree import tree_from_path
from rbs.model import Digest, DigestFunction
from rbs.server.cas_metrics import CountingDiskStore
from rbs.server.cas_service import CasServicer, add_cas_servicer
from rbs.server.instances import Instances
from rbs.wire import find_missing

B3 = DigestFunction.BLAKE3


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


def fill(root: Path, start: int, n: int) -> list[Digest]:
    """Blobs `start` .. `n - 1` of 8 bytes, written through non-durable batches."""
    store = DiskStore(root, durable=False)
    t = time.perf_counter()
    digests: list[Digest] = []
    for at in range(start, n, 50_000):
        with store.batch() as b:
            digests.extend(b.put(blob(i)) for i in range(at, min(n, at + 50_000)))
    took = time.perf_counter() - t
    print(f"    filled the store up to {n:,} blobs in {took:.1f} s")
    return digests


def log_slope(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of log(time) over log(size): 0 flat, 1 linear."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(t, 1e-6)) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def bench_find_missing(work: Path, runs: int, n: int, sizes: list[int]) -> None:
    print(f"(c) find_missing of {n:,} digests (up to half present) at {len(sizes)} store sizes")
    print("    cold: a restarted store whose present blobs were last used 2 h ago (each")
    print("    answer also queues a touch, done by a background thread: 'touches');")
    print("    warm: the same query again. Goal <= 0.2 s at 1,000,000 blobs.")
    root = work / "fm-store"
    stored: list[Digest] = []
    cold_points, warm_points = [], []
    for size in sizes:
        stored += fill(root, len(stored), size)
        half = min(n // 2, len(stored))
        step = max(1, len(stored) // half)
        present = stored[::step][:half]
        absent = [Digest.of(b"absent %d" % i) for i in range(n - len(present))]
        query = [*present, *absent]
        random.Random(size).shuffle(query)
        want = set(absent)
        paths = DiskStore(root)

        def call(store: DiskStore, query: list[Digest] = query, want: set[Digest] = want) -> Any:
            return timed_query(store, query, want)

        plain = [call(paths) for _ in range(runs)]
        request = re_pb2.FindMissingBlobsRequest(
            blob_digests=[digest_to_pb(d) for d in query], digest_function=function_to_pb(B3)
        ).SerializeToString()
        opens, touches = [], []
        cold: list[tuple[float, float]] = []
        warm: list[tuple[float, float]] = []
        rpc_cold: list[tuple[float, float]] = []
        rpc_warm: list[tuple[float, float]] = []
        grpc_cold: list[tuple[float, float]] = []
        grpc_warm: list[tuple[float, float]] = []
        memory = 0
        for run in range(runs):
            old = time.time() - 7200
            for d in present:
                os.utime(paths.path_of(d), (old, old))
            t = time.perf_counter()
            s = CountingDiskStore(root, index=True)  # the server's store
            assert s.index is not None and s.index.ready.wait(3600)
            opens.append(time.perf_counter() - t)
            # Cold by one path or another: the first answer touches what it finds.
            if run % 3 == 0:
                cold.append(call(s))
            elif run % 3 == 1:
                rpc_cold.append(server_path(s, request, len(absent)))
            else:
                first, *again = grpc_calls(s, request, len(query), len(absent), runs)
                grpc_cold.append(first)
                grpc_warm.extend(again)
            t = time.perf_counter()
            assert s.index.flush_touches(3600)
            touches.append(time.perf_counter() - t + (cold or rpc_cold or grpc_cold)[-1][0])
            warm.extend(call(s) for _ in range(runs))
            rpc_warm.extend(server_path(s, request, len(absent)) for _ in range(runs))
            if not grpc_warm and run == runs - 1:
                grpc_warm.extend(grpc_calls(s, request, len(query), len(absent), runs)[1:])
            memory = s.index.memory_bytes()
            s.close()
        cold_points.append((size, statistics.median(c for _, c in cold)))
        warm_points.append((size, statistics.median(c for _, c in warm)))
        print(f"    {size:>9,} blobs (median of {runs}; load {load()}):")
        print(f"      no index: one stat per digest    {median2(plain)}")
        print(f"      index, cold                      {median2(cold)}")
        print(f"      index, warm                      {median2(warm)}")
        if rpc_cold:
            print(
                f"      FindMissingBlobs request, cold   {median2(rpc_cold)}  (bytes in, bytes out)"
            )
        print(f"      FindMissingBlobs request, warm   {median2(rpc_warm)}")
        if grpc_cold:
            print(f"      whole gRPC call, cold            {median2(grpc_cold)}  (client too)")
        print(f"      whole gRPC call, warm            {median2(grpc_warm)}  (client too)")
        print(f"      touches of the cold answer done  {statistics.median(touches):.3f} s after it")
        print(f"      index built at open in           {statistics.median(opens):.2f} s wall")
        print(f"      index memory                     {memory / 2**20:.1f} MiB")
    if len(sizes) > 1:
        print(f"    slope (CPU ~ blobs^slope): cold {log_slope(cold_points):.2f}, ", end="")
        print(f"warm {log_slope(warm_points):.2f}")


def server_path(store: CountingDiskStore, request: bytes, absent: int) -> tuple[float, float]:
    """(wall s, CPU s) of what the server's FindMissingBlobs does with a request past
    gRPC: read the bytes, answer from the index, join the answer's bytes."""
    servicer = CasServicer(store, Instances([], [B3, DigestFunction.SHA256]), 4 << 20)
    wall, cpu = time.perf_counter(), time.process_time()
    answer = servicer._find_missing_bulk(store, request)
    took = time.perf_counter() - wall, time.process_time() - cpu
    assert answer is not None, "index not ready or not canonical bytes"
    got = re_pb2.FindMissingBlobsResponse.FromString(answer).missing_blob_digests
    assert len(got) == absent
    return took


def grpc_calls(
    store: CountingDiskStore, request: bytes, digests: int, absent: int, runs: int
) -> list[Any]:
    """(wall s, CPU s of this process: server and client) of whole FindMissingBlobs
    calls over a local gRPC connection: the first call, then `runs` more.

    The channel first carries one request of as many digests, all absent (they change
    nothing in the store), as a build's long-lived channel has: a fresh HTTP/2
    connection starts with 64 KiB flow-control windows that grow over the first
    megabytes, which would put the connection's warm-up into the store's "cold"."""
    warmup = re_pb2.FindMissingBlobsRequest(
        blob_digests=[digest_to_pb(Digest.of(b"warm-up %d" % i)) for i in range(digests)],
        digest_function=function_to_pb(B3),
    ).SerializeToString()

    async def calls() -> list[tuple[float, float]]:
        opts = [("grpc.max_receive_message_length", 64 << 20)]
        opts.append(("grpc.max_send_message_length", 64 << 20))
        server = grpc.aio.server(options=opts)
        servicer = CasServicer(store, Instances([], [B3, DigestFunction.SHA256]), 4 << 20)
        add_cas_servicer(server, servicer)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        out = []
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=opts) as ch:
                call = ch.unary_unary(
                    find_missing.METHOD, request_serializer=None, response_deserializer=None
                )
                await call(warmup)
                for _ in range(runs + 1):
                    wall, cpu = time.perf_counter(), time.process_time()
                    answer = await call(request)
                    out.append((time.perf_counter() - wall, time.process_time() - cpu))
                    resp = re_pb2.FindMissingBlobsResponse.FromString(answer)
                    assert len(resp.missing_blob_digests) == absent
        finally:
            await server.stop(None)
        return out

    return asyncio.run(calls())


def timed_query(store: DiskStore, query: list[Digest], want: set[Digest]) -> tuple[float, float]:
    """(wall s, CPU s of this process) of one find_missing of the query, asked with
    fresh hash strings as a parsed request has them (their Python hash not cached)."""
    query = [Digest(function=d.function, hash=d.hash.encode().decode(), size=d.size) for d in query]
    wall, cpu = time.perf_counter(), time.process_time()
    got = store.find_missing(query)
    took = time.perf_counter() - wall, time.process_time() - cpu
    assert set(got) == want and len(got) == len(want)
    return took


def median2(values: list[tuple[float, float]]) -> str:
    walls, cpus = zip(*values, strict=True)
    return f"{statistics.median(walls):.3f} s wall  {statistics.median(cpus):.3f} s CPU"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, default=None, help="work folder parent")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--big-mib", type=int, default=1024)
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--digests", type=int, default=100_000)
    p.add_argument(
        "--store-blobs",
        default="10000,100000,300000,1000000",
        help="store sizes for (c), comma-separated, ascending",
    )
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
            sizes = [int(x) for x in args.store_blobs.split(",")]
            bench_find_missing(work, args.runs, args.digests, sizes)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
