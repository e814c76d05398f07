"""Benchmark the REAPI cache server over loopback and print figures (medians).

    .venv/bin/python bench/remote.py                 # everything (1 GiB blob, 300 genrules)
    .venv/bin/python bench/remote.py --blob-mib 256 --genrules 100 --no-bazel

Figures: ByteStream upload/download of one large blob (MB/s, and the server's peak
RSS to show it streams in constant memory); FindMissingBlobs for 10,000 digests
(ms); a small (100-byte) ByteStream Write and Read round trip (ms); Bazel's
clean-then-rebuild of a generated genrule workspace served from the rbs cache
(seconds, and as a ratio to Bazel's own local build of it in the same run); and
Bazel's remote execution of the same genrules (`--remote_executor`, `--jobs=32`,
`--noremote_accept_cached`, a warm Bazel server) on one worker with 2 build slots,
with where each action's time went (the server's operation times and the worker's
ExecutedActionMetadata, as medians per action).
The server runs as a separate `rbs remote serve` process, as in production.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import select
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteStore, connect
from rbs.wire.resource_names import format_read_name, format_write_name

SHA = DigestFunction.SHA256


def start_server(data_dir: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rbs", "remote", "serve", "--port", "0"),
            *("--data-dir", str(data_dir), "--log-level", "warning"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    m = re.search(r"serving on [\d.]+:(\d+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    return proc, int(m[1])


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_large_blob(store: RemoteStore, tmp: Path, mib: int, server_pid: int) -> None:
    path = tmp / "large.bin"
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(mib):
            # Distinct blocks, so nothing about the blob is trivially compressible.
            f.write(i.to_bytes(8, "little") + block[8:])
    digest = Digest.of(b"", SHA)
    h = SHA.hasher()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    digest = Digest(function=SHA, hash=h.hexdigest(), size=mib << 20)
    rss_before = peak_rss_mib(server_pid)
    up = timed(lambda: store.put_file(path, expected=digest))
    path.unlink()

    def download() -> None:
        with store.open(digest) as f:  # verifies the digest as it reads
            while f.read(1 << 20):
                pass

    down = timed(download)
    size_mb = (mib << 20) / 1e6
    print(f"ByteStream upload   {mib} MiB: {size_mb / up:8.0f} MB/s  ({up:.2f} s)")
    print(f"ByteStream download {mib} MiB: {size_mb / down:8.0f} MB/s  ({down:.2f} s)")
    print(
        f"server peak RSS: {rss_before:.0f} MiB before, {peak_rss_mib(server_pid):.0f} MiB "
        f"after moving {mib} MiB each way"
    )


def bench_find_missing(store: RemoteStore) -> None:
    present = store.put_blobs([f"present {i}".encode() for i in range(5000)], SHA)
    absent = [Digest.of(f"absent {i}".encode(), SHA) for i in range(5000)]
    digests = present + absent
    runs = [timed(lambda: store.find_missing(digests)) for _ in range(7)]
    assert len(store.find_missing(digests)) == 5000
    print(
        f"FindMissingBlobs 10,000 digests (half present): {statistics.median(runs) * 1e3:6.1f} ms"
    )


def bench_small_round_trips(target: str) -> None:
    with connect(target) as ch:
        bs = bs_grpc.ByteStreamStub(ch)
        writes, reads = [], []
        for i in range(300):
            data = f"small blob {i} ".encode() * 7
            d = Digest.of(data, SHA)
            req = bs_pb2.WriteRequest(
                resource_name=format_write_name("", str(uuid.uuid4()), d),
                data=data,
                finish_write=True,
            )
            writes.append(timed(lambda req=req: bs.Write(iter([req]))))  # type: ignore[misc]
            rreq = bs_pb2.ReadRequest(resource_name=format_read_name("", d))
            reads.append(timed(lambda rreq=rreq: list(bs.Read(rreq))))  # type: ignore[misc]
    print(
        f"small ByteStream round trip ({len(data)} B): write {statistics.median(writes) * 1e3:.2f} ms, "
        f"read {statistics.median(reads) * 1e3:.2f} ms"
    )


class Bazel:
    def __init__(self, bazel: str, ws: Path, root: Path) -> None:
        self.bazel = bazel
        self.ws = ws
        self.startup = [f"--output_user_root={root / 'bazel-root'}", "--max_idle_secs=300"]
        self.env = {**os.environ, "HOME": str(root)}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [self.bazel, *self.startup, *args],
            cwd=self.ws,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            raise SystemExit(f"bazel {' '.join(args)} failed:\n{r.stderr[-3000:]}")
        return r

    def clean_build(self, *flags: str, strategy: str = "local") -> tuple[float, str]:
        self.run("clean")
        t = time.perf_counter()
        r = self.run(
            "build",
            "--experimental_repository_disable_download",
            "--incompatible_strict_action_env",
            f"--spawn_strategy={strategy}",
            *flags,
            "//...",
        )
        m = re.search(r"INFO: (\d+ process.*)", r.stderr)
        return time.perf_counter() - t, m[1] if m else ""


def bench_bazel(port: int, tmp: Path, genrules: int, runs: int) -> None:
    bazel_bin = shutil.which("bazel")
    if bazel_bin is None:
        print("bazel: not installed (make system-deps); skipped")
        return
    ws = tmp / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / ".bazelrc").write_text("build --nosandbox_debug\n")
    (ws / "BUILD").write_text(
        "".join(
            f'genrule(name = "g{i}", outs = ["g{i}.txt"], cmd = "echo {i} > $@")\n'
            for i in range(genrules)
        )
    )
    bazel = Bazel(bazel_bin, ws, tmp)
    remote = f"--remote_cache=grpc://127.0.0.1:{port}"
    try:
        bazel.clean_build()  # starts Bazel's server; not measured
        local = [bazel.clean_build()[0] for _ in range(runs)]
        bazel.clean_build(remote)  # fills the cache
        cached = []
        for _ in range(runs):
            seconds, summary = bazel.clean_build(remote)
            cached.append(seconds)
            if f"{genrules} remote cache hit" not in summary:
                raise SystemExit(f"expected {genrules} remote cache hits, got: {summary}")
    finally:
        subprocess.run([bazel_bin, *bazel.startup, "shutdown"], cwd=ws, env=bazel.env, timeout=120)
    lm, cm = statistics.median(local), statistics.median(cached)
    print(f"Bazel {genrules} genrules, clean build, local:            {lm:6.2f} s")
    print(
        f"Bazel {genrules} genrules, clean rebuild from rbs cache:  {cm:6.2f} s  "
        f"({cm / lm:.2f}x the local build; {summary})"
    )


def _phases(db: Path, slots: int) -> dict[str, float]:
    """Median ms per action of each step, from the operations the server kept; and the
    time a build slot sat idle between one action's end and the next one's start."""
    from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2

    steps: dict[str, list[float]] = {}
    spans: list[tuple[int, int]] = []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    for created, updated, blob in con.execute(
        "SELECT created, updated, response FROM operations WHERE response IS NOT NULL"
    ):
        resp = re_pb2.ExecuteResponse()
        resp.ParseFromString(blob)
        m = resp.result.execution_metadata
        t = {
            "created": created * 1e9,
            "start": m.worker_start_timestamp.ToNanoseconds(),
            "fetched": m.input_fetch_completed_timestamp.ToNanoseconds(),
            "ran": m.execution_completed_timestamp.ToNanoseconds(),
            "uploaded": m.output_upload_completed_timestamp.ToNanoseconds(),
            "done": m.worker_completed_timestamp.ToNanoseconds(),
            "completed": updated * 1e9,
        }
        if not t["start"]:
            continue
        spans.append((int(t["start"]), int(t["done"])))
        names = list(t)
        for a, b in itertools.pairwise(names):
            steps.setdefault(f"{a}->{b}", []).append((t[b] - t[a]) / 1e6)
    con.close()
    out = {k: statistics.median(v) for k, v in steps.items()}
    # Replay the runs on `slots` slots in start order: each goes to the slot free first.
    free = [0] * slots
    idle: list[float] = []
    for start, done in sorted(spans):
        k = min(range(slots), key=lambda i: free[i])
        if free[k]:
            idle.append(max(0, start - free[k]) / 1e6)
        free[k] = done
    if idle:
        out["slot idle between actions"] = statistics.median(idle)
    return out


def _server_spans(db: Path, windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Per build: (first operation created to last one finished, the build's wall time)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = []
    for t0, t1 in windows:
        first, last = con.execute(
            "SELECT min(created), max(updated) FROM operations WHERE created BETWEEN ? AND ?",
            (t0, t1),
        ).fetchone()
        out.append(((last or 0) - (first or 0), t1 - t0))
    con.close()
    return out


def bench_bazel_exec(tmp: Path, genrules: int, runs: int, slots: int = 2) -> None:
    bazel_bin = shutil.which("bazel")
    if bazel_bin is None:
        print("bazel remote execution: bazel is not installed (make system-deps); skipped")
        return
    root = tmp / "exec"
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "WORKSPACE").write_text("")
    (ws / ".bazelrc").write_text("build --nosandbox_debug\n")
    (ws / "BUILD").write_text(
        "".join(
            f'genrule(name = "x{i}", outs = ["x{i}.txt"], cmd = "echo exec {i} > $@")\n'
            for i in range(genrules)
        )
    )
    proc, port = start_server(root / "server")
    ready = root / "worker.ready"
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "rbs", "remote", "worker", "--server", f"127.0.0.1:{port}"),
            *("--work-dir", str(root / "worker"), "--build-slots", str(slots)),
            *("--ready-file", str(ready), "--log-level", "warning"),
        ]
    )
    bazel = Bazel(bazel_bin, ws, root)
    flags = (
        f"--remote_executor=grpc://127.0.0.1:{port}",
        "--jobs=32",
        "--noremote_accept_cached",
        "--remote_timeout=120",
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the worker did not register within 60 s")
            time.sleep(0.05)
        # Starts Bazel's server and warms both ends; not measured.
        bazel.clean_build(*flags, strategy="remote")
        took, windows = [], []
        for _ in range(runs):
            t0 = time.time()
            seconds, summary = bazel.clean_build(*flags, strategy="remote")
            took.append(seconds)
            windows.append((t0, time.time()))
            if f"{genrules} remote" not in summary:
                raise SystemExit(f"expected {genrules} remote executions, got: {summary}")
        phases = _phases(root / "server" / "execution.db", slots)
        spans = _server_spans(root / "server" / "execution.db", windows)
    finally:
        subprocess.run([bazel_bin, *bazel.startup, "shutdown"], cwd=ws, env=bazel.env, timeout=120)
        for p in (worker, proc):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
    med = statistics.median(took)
    print(
        f"Bazel {genrules} genrules, remote execution on 1 worker ({slots} slots), "
        f"--jobs=32: {med:6.2f} s median of {runs} (goal <= 5 s; {summary}; "
        f"runs {', '.join(f'{t:.2f}' for t in took)})"
    )
    print(
        "  per action, median ms: "
        + ", ".join(f"{k} {v:.1f}" for k, v in phases.items())
        + f"; wall per action {med / genrules * 1e3:.1f} ms"
    )
    print(
        "  the server saw each build's operations (first Execute to last result) for "
        + ", ".join(f"{a:.2f} s of {w:.2f} s" for a, w in spans)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blob-mib", type=int, default=1024, help="large blob size in MiB")
    ap.add_argument("--genrules", type=int, default=300)
    ap.add_argument("--bazel-runs", type=int, default=3)
    ap.add_argument("--no-bazel", action="store_true")
    ap.add_argument("--exec-only", action="store_true", help="only Bazel remote execution")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rbs-bench-remote-") as tmp_name:
        tmp = Path(tmp_name)
        if args.exec_only:
            bench_bazel_exec(tmp, args.genrules, args.bazel_runs)
            return
        proc, port = start_server(tmp / "server")
        try:
            target = f"grpc://127.0.0.1:{port}"
            with connect(target) as ch:
                store = RemoteStore(ch)
                bench_small_round_trips(target)
                bench_find_missing(store)
                bench_large_blob(store, tmp, args.blob_mib, proc.pid)
            if not args.no_bazel:
                bench_bazel(port, tmp, args.genrules, args.bazel_runs)
                bench_bazel_exec(tmp, args.genrules, args.bazel_runs)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
