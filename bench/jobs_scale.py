"""Job figures at scale: `rbs job list` latency, log ingest and serve rates, bytes per log line,
server memory per pending job.

    rbs job list against N jobs, fresh process (N up to 100,000)   < 0.5 s at 100,000
    log ingest into the store, batches of 1,000 lines             >= 200,000 lines/s
    log serve, GET .../logs of a 1,000,000-line job, to the socket >= 1,000,000 lines/s
    a 20-character line on disk (job_logs.db, all pages)          <= 40 B
    server RSS growth over 100,000 pending plain jobs             <= 2 KB per job
    a scheduler step's p99 over 100,000 restored jobs, without and with gc.freeze()
    server RSS per ended job, restored from a journal of 100,000   small (ended jobs are
                                                                  kept out of memory)

Journals for the list figures are written directly (Store.step over the pure core, the
same rows a server writes) and a real `rbs remote serve` is started on each, with no
worker so every job stays PENDING: `rbs job list` lists them all (its default, active
jobs) and shows the first page. The memory figure submits through the HTTP API to a live
server, as users do. Run alone, or from bench/jobs.py:

    .venv/bin/python bench/jobs_scale.py [--sizes 1000,5000,20000,100000] [--mem-jobs 100000]
        [--gc-jobs 100000] [--gc-steps 30000] [--only list|logs|memory|gc]

The step figure restores a journal of pending jobs as the server does and times one-submit
`Store.step`s in this process, once as restored and once after `gc.freeze()` (what the
server does after restoring): a full collection walks every tracked object, so with the
restored jobs frozen it walks only what came after.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rbs.client.jobs import JobsClient
from rbs.model import JobManifest, LogLine, LogStream, Resources
from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.core import Scheduler
from rbs.scheduler.events import Submit, TaskExited, WorkerDown, WorkerUp
from rbs.scheduler.instructions import Start
from rbs.scheduler.store import Store
from rbs.server.job_logs import JobLogs

RBS = [sys.executable, "-m", "rbs"]


def _serve(data: Path, log: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """`rbs remote serve` on `data`; (process, gRPC port, HTTP port) once it is ready."""
    ready = data.parent / f"{data.name}.ready"
    ready.unlink(missing_ok=True)
    with open(log, "wb") as out:
        flags = ["--port", "0", "--data-dir", str(data), "--ready-file", str(ready)]
        proc = subprocess.Popen(
            [*RBS, "remote", "serve", *flags, "--log-level", "warning"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited:\n{log.read_text()[-2000:]}")
        try:
            doc = json.loads(ready.read_text())
            return proc, int(doc["port"]), int(doc["http_port"])
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.05)
    sys.exit(f"the server was not ready in 600 s; see {log}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _cpu(pid: int) -> float:
    """The process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _manifest(i: int) -> JobManifest:
    return JobManifest(
        name=f"job-{i}", command=("true",), resources=Resources(cpu_millis=100), priority=i % 10
    )


def write_journal(data: Path, n: int) -> None:
    """`n` pending jobs in `data`/jobs.db, as a server would have journaled them."""
    data.mkdir(parents=True)
    store = Store(data / "jobs.db", durable=False)
    sched = Scheduler(SchedulerConfig())
    now = time.time() - n
    for start in range(0, n, 2000):
        events = [Submit(manifest=_manifest(i)) for i in range(start, min(n, start + 2000))]
        store.step(sched, events, now + start)
    store.close()


def _slope(points: list[tuple[int, float]]) -> float:
    """The exponent k of t ~ n^k, fitted over the points (least squares in log-log)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def bench_list(tmp: Path, sizes: list[int], runs: int) -> None:
    points = []
    for n in sizes:
        data = tmp / f"list-{n}"
        write_journal(data, n)
        proc, port, _ = _serve(data, tmp / f"list-{n}.log")
        try:
            env = {**os.environ, "RBS_REMOTE": f"127.0.0.1:{port}"}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
            cmd = [*RBS, "job", "list"]
            subprocess.run(cmd, env=env, capture_output=True, check=True)  # warm the cache
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                times.append(time.perf_counter() - t)
            last = out.stdout.strip().splitlines()[-1]
            med = statistics.median(times)
            points.append((n, med))
            print(f"  rbs job list, {n:>7,} pending jobs: {med * 1e3:6.0f} ms  ({last!r})")
        finally:
            _stop(proc)
        shutil.rmtree(data, ignore_errors=True)
    print(
        f"rbs job list: {points[-1][1] * 1e3:.0f} ms at {points[-1][0]:,} jobs (goal < 500 ms);"
        f" slope {_slope(points):.2f} (time ~ jobs^slope; 0 = flat)"
    )


def _lines(n: int, width: int = 20) -> list[LogLine]:
    t0 = time.time()
    return [
        LogLine(
            seq=i + 1,
            time=t0 + i * 1e-4,
            stream=LogStream.OUT,
            text=f"line {i:0{width - 5}d}"[:width],
            task=None,
            attempt=1,
            rank=0,
        )
        for i in range(n)
    ]


def _file_bytes(db: Path) -> int:
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (pages,) = con.execute("PRAGMA page_count").fetchone()
    (size,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    return int(pages * size)


def bench_random_text(tmp: Path, n: int) -> None:
    """Bytes per line when the text does not compress: 20 random letters and digits."""
    import random

    rng = random.Random(1)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    lines = [
        LogLine(
            seq=i + 1,
            time=1.7e9 + i * 0.0137,
            stream=LogStream.OUT,
            text="".join(rng.choices(letters, k=20)),
            task=None,
            attempt=1,
            rank=0,
        )
        for i in range(n)
    ]
    db = tmp / "random.db"
    logs = JobLogs(db)
    for start in range(0, n, 1000):
        logs.append(1, lines[start : start + 1000])
    logs.close()
    print(f"log storage: {_file_bytes(db) / n:.1f} B per line of 20 random characters (goal <= 40)")


def bench_log_store(tmp: Path, n: int) -> Path:
    """Ingest `n` 20-character lines in batches of 1,000; returns the data dir (one job)."""
    data = tmp / "logs"
    write_journal(data, 1)
    lines = _lines(n)
    logs = JobLogs(data / "job_logs.db")
    t, cpu = time.perf_counter(), time.process_time()
    for start in range(0, n, 1000):
        logs.append(1, lines[start : start + 1000])
    took, cpu = time.perf_counter() - t, time.process_time() - cpu
    logs.close()
    pages = _file_bytes(data / "job_logs.db")
    print(
        f"log ingest: {n / took:,.0f} lines/s ({n:,} lines of 20 characters, batches of 1,000;"
        f" goal >= 200,000); {n / cpu:,.0f} lines per CPU-second"
    )
    print(f"log storage: {pages / n:.1f} B per numbered 20-character line, whole file (goal <= 40)")
    return data


def _get_all(port: int, path: str) -> tuple[int, float]:
    """GET `path` over a raw socket; (lines in the body, seconds to its end)."""
    s = socket.create_connection(("127.0.0.1", port))
    t = time.perf_counter()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    newlines = 0
    while chunk := s.recv(1 << 20):
        newlines += chunk.count(b"\n")
    took = time.perf_counter() - t
    s.close()
    return newlines, took


def _curl_all(port: int, path: str) -> float:
    """GET `path` with curl into /dev/null (a reader that costs little); seconds taken."""
    t = time.perf_counter()
    subprocess.run(["curl", "-sS", "-o", "/dev/null", f"http://127.0.0.1:{port}{path}"], check=True)
    return time.perf_counter() - t


def bench_log_serve(tmp: Path, data: Path, n: int, runs: int) -> None:
    proc, _, http = _serve(data, tmp / "logs.log")
    try:
        rates, per_cpu = [], []
        for _ in range(runs):
            cpu = _cpu(proc.pid)
            newlines, took = _get_all(http, "/v1/jobs/1/logs")
            if newlines < n:
                sys.exit(f"the log answer had {newlines} lines, want {n}")
            rates.append(n / took)
            per_cpu.append(n / max(1e-9, _cpu(proc.pid) - cpu))
        print(
            f"log serve: {statistics.median(rates):,.0f} lines/s (GET .../logs of {n:,} lines"
            f" to a socket read in Python, median of {runs}; goal >= 1,000,000);"
            f" {statistics.median(per_cpu):,.0f} lines per CPU-second of the server"
        )
        if shutil.which("curl"):
            rates, per_cpu = [], []
            for _ in range(runs):
                cpu = _cpu(proc.pid)
                took = _curl_all(http, "/v1/jobs/1/logs")
                rates.append(n / took)
                per_cpu.append(n / max(1e-9, _cpu(proc.pid) - cpu))
            print(
                f"log serve: {statistics.median(rates):,.0f} lines/s with curl to /dev/null,"
                f" {statistics.median(per_cpu):,.0f} lines per CPU-second of the server"
                f" (load {' '.join(f'{x:.1f}' for x in os.getloadavg())})"
            )
    finally:
        _stop(proc)


def _step_times(data: Path, steps: int, freeze: bool) -> tuple[list[float], list[float]]:
    """Each one-submit step's seconds and each full collection's, over the journal in
    `data` restored as the server restores it (with or without gc.freeze())."""
    store = Store(data / "jobs.db", durable=False)
    sched = store.restore(SchedulerConfig(), time.time(), forget_ended=True)
    gc.collect()
    if freeze:
        gc.freeze()
    full: list[float] = []
    began = [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                began[0] = time.perf_counter()
            else:
                full.append(time.perf_counter() - began[0])

    gc.callbacks.append(watch)
    times = []
    now = time.time()
    try:
        for i in range(steps):
            t = time.perf_counter()
            store.step(sched, [Submit(manifest=_manifest(i))], now + i * 1e-3)
            times.append(time.perf_counter() - t)
    finally:
        gc.callbacks.remove(watch)
        if freeze:
            gc.unfreeze()
        store.close()
    return times, full


def bench_gc_step(tmp: Path, n: int, steps: int) -> None:
    data = tmp / "gc"
    write_journal(data, n)
    for freeze in (False, True):
        copy = tmp / f"gc-{freeze}"
        shutil.copytree(data, copy)
        times, full = _step_times(copy, steps, freeze)
        shutil.rmtree(copy, ignore_errors=True)
        q = statistics.quantiles(times, n=100)
        walks = (
            f"{len(full)} full collections, median {statistics.median(full) * 1e3:.0f} ms"
            if full
            else "no full collection"
        )
        print(
            f"scheduler step over {n:,} restored jobs, {'gc.freeze()' if freeze else 'as restored'}:"
            f" p50 {q[49] * 1e3:.2f} ms, p99 {q[98] * 1e3:.2f} ms, max {max(times) * 1e3:.0f} ms"
            f" ({steps:,} one-submit steps; {walks})"
        )
    shutil.rmtree(data, ignore_errors=True)


def write_ended_journal(data: Path, n: int) -> None:
    """`n` jobs that ran and completed on one big worker, journaled as a server does."""
    data.mkdir(parents=True)
    store = Store(data / "jobs.db", durable=False)
    sched = Scheduler(SchedulerConfig(), forget_ended=True)
    batch, now = 2000, time.time() - n
    big = WorkerUp(
        worker_id="bench",
        hostname="bench",
        address="127.0.0.1",
        cpu_millis=batch * 1000,
        memory_bytes=batch << 30,
        gpus=(),
        job_slots=batch,
    )
    store.step(sched, [big], now)
    for first in range(0, n, batch):
        events = [Submit(manifest=_manifest(i)) for i in range(first, min(n, first + batch))]
        out = store.step(sched, events, now + first)
        exits = [
            TaskExited(run=i.run, worker_id=i.worker_id, exit_code=0)
            for i in out
            if isinstance(i, Start)
        ]
        store.step(sched, exits, now + first + 1)
    store.step(sched, [WorkerDown(worker_id="bench")], now + n)
    store.close()


def bench_ended_memory(tmp: Path, n: int) -> None:
    rss = {}
    for name, jobs in (("empty", 0), ("ended", n)):
        data = tmp / f"ended-{name}"
        if jobs:
            write_ended_journal(data, jobs)
        else:
            data.mkdir()
        proc, port, _ = _serve(data, tmp / f"ended-{name}.log")
        try:
            with JobsClient(f"127.0.0.1:{port}") as c:
                c.status()  # the same code paths run in both
                if jobs:
                    shown = c.show(str(jobs))  # served from the journal
                    assert shown.state == "COMPLETED", shown.state
            rss[name] = _rss(proc.pid)
        finally:
            _stop(proc)
        shutil.rmtree(data, ignore_errors=True)
    per = (rss["ended"] - rss["empty"]) / n
    print(
        f"server memory: {per:,.0f} B RSS per ended job restored ({n:,} ended jobs; RSS"
        f" {rss['empty'] >> 20} MiB empty -> {rss['ended'] >> 20} MiB)"
    )


def bench_memory(tmp: Path, n: int, clients: int) -> None:
    proc, port, _ = _serve(tmp / "mem", tmp / "mem.log")
    try:
        with JobsClient(f"127.0.0.1:{port}") as c:
            c.submit(["true"], cpus="0.1")  # warm: the first job's code paths
        before = _rss(proc.pid)
        share = n // clients

        def submit_share(k: int) -> None:
            with JobsClient(f"127.0.0.1:{port}") as c:
                for i in range(share):
                    c.submit(["true"], name=f"m{k}-{i}", cpus="0.1")

        t = time.perf_counter()
        threads = [threading.Thread(target=submit_share, args=(k,)) for k in range(clients)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        took = time.perf_counter() - t
        after = _rss(proc.pid)
        total = share * clients
        print(
            f"server memory: {(after - before) / total:,.0f} B RSS per pending job"
            f" ({total:,} plain jobs submitted over HTTP in {took:.0f} s; RSS {before >> 20} MiB"
            f" -> {after >> 20} MiB; goal <= 2,048)"
        )
    finally:
        _stop(proc)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,20000,100000", help="job counts for list")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--log-lines", type=int, default=1_000_000)
    ap.add_argument("--mem-jobs", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=4, help="submitting threads (memory)")
    ap.add_argument("--gc-jobs", type=int, default=100_000, help="restored jobs (step p99)")
    ap.add_argument("--gc-steps", type=int, default=30_000)
    ap.add_argument("--ended-jobs", type=int, default=100_000, help="ended jobs (memory)")
    ap.add_argument("--only", choices=["list", "logs", "memory", "gc"], help="one part only")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="rbs-bench-scale-"))
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    try:
        part = args.only
        if part in (None, "list"):
            bench_list(tmp, [int(x) for x in args.sizes.split(",")], args.runs)
        if part in (None, "logs"):
            data = bench_log_store(tmp, args.log_lines)
            bench_random_text(tmp, min(args.log_lines, 200_000))
            bench_log_serve(tmp, data, args.log_lines, args.runs)
        if args.mem_jobs and part in (None, "memory"):
            bench_memory(tmp, args.mem_jobs, args.clients)
        if args.ended_jobs and part in (None, "memory"):
            bench_ended_memory(tmp, args.ended_jobs)
        if args.gc_jobs and part in (None, "gc"):
            bench_gc_step(tmp, args.gc_jobs, args.gc_steps)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
