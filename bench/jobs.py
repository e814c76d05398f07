"""Job system figures on one local worker: throughput, CLI latency, start latency, chains.

The server (`rbs remote serve`) and the worker (`rbs remote worker`) run as their own
processes, as in a deployment; the client is the Python API in this process, or the
`rbs` CLI in a shell loop. Every figure is a median over several runs. Goals:

    array of 1,000 `true` tasks, submit to all completed     >= 200 tasks/s
    1,000 `true` jobs submitted one by one (Python client)    >= 1,000 submissions/s
        ... and until all of them completed                   >= 200 jobs/s
    `rbs job submit -- true` in a shell loop, per call        <= 50 ms
    submit-to-start latency on an idle cluster                <= 20 ms
    chain of 20 `--deps afterok` jobs, first submit to last   <= 0.4 s

At scale (bench/jobs_scale.py, run after these unless --no-scale; --only-scale alone):

    rbs job list against 100,000 jobs (and 3 smaller sizes)  < 0.5 s, with the slope
    log ingest / log serve                                    >= 200,000 / 1,000,000 lines/s
    bytes per 20-character log line                           <= 40 B
    server RSS growth per pending job (100,000 jobs)          <= 2 KB

    .venv/bin/python bench/jobs.py [--job-slots 8] [--runs 3] [--durable] [--no-scale]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rbs.client.jobs import JobsClient

RBS = [sys.executable, "-m", "rbs"]
# Small requests, so the worker's job slots, not its cpus or memory, bound concurrency.
SMALL = {"cpus": "0.1", "memory_gb": "0.0625"}


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([*RBS, *args], stdout=out, stderr=subprocess.STDOUT)


def _ready(proc: subprocess.Popen[bytes], path: Path, log: Path) -> dict[str, int]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{log.name} exited:\n{log.read_text()[-2000:]}")
        try:
            data: dict[str, int] = json.loads(path.read_text())
            return data
        except (FileNotFoundError, ValueError):
            time.sleep(0.02)
    sys.exit(f"{path.name} did not appear in 60 s; see {log}")


def start(
    tmp: Path, job_slots: int, durable: bool = False
) -> tuple[list[subprocess.Popen[bytes]], str]:
    config = tmp / "server.toml"
    config.write_text(f"[jobs]\ndurable = {'true' if durable else 'false'}\n")
    server = _spawn(
        [
            "remote",
            "serve",
            "--config",
            str(config),
            "--port",
            "0",
            "--data-dir",
            str(tmp / "server"),
            "--ready-file",
            str(tmp / "server.ready"),
            "--log-level",
            "warning",
        ],
        tmp / "server.log",
    )
    port = _ready(server, tmp / "server.ready", tmp / "server.log")["port"]
    worker = _spawn(
        [
            "remote",
            "worker",
            "--server",
            f"127.0.0.1:{port}",
            "--work-dir",
            str(tmp / "worker"),
            "--job-slots",
            str(job_slots),
            "--build-slots",
            "1",
            "--ready-file",
            str(tmp / "worker.ready"),
            "--log-level",
            "warning",
        ],
        tmp / "worker.log",
    )
    _ready(worker, tmp / "worker.ready", tmp / "worker.log")
    return [worker, server], f"127.0.0.1:{port}"


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:  # the worker first, then the server
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _median(runs: int, once: Callable[[], float]) -> tuple[float, list[float]]:
    values = [once() for _ in range(runs)]
    return statistics.median(values), values


def _check(client: JobsClient, job: str) -> None:
    info = client.wait(job, timeout=600)
    if not info.ok:
        sys.exit(f"job {job} ended {info.state}; the benchmark expects COMPLETED")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SERVER_PID: list[int] = []  # the server's pid, once started
ARRAY_SERVER_CPU: list[float] = []  # the server's CPU seconds per task, one per array


def bench_array(client: JobsClient, n: int) -> float:
    c0 = process_cpu(SERVER_PID[0]) if SERVER_PID else 0.0
    t = time.perf_counter()
    job = client.submit(["true"], array=f"0-{n - 1}", **SMALL)
    _check(client, job)
    took = time.perf_counter() - t
    if SERVER_PID:
        ARRAY_SERVER_CPU.append((process_cpu(SERVER_PID[0]) - c0) / n)
    return n / took


def bench_one_by_one(client: JobsClient, n: int) -> tuple[float, float]:
    t = time.perf_counter()
    jobs = [client.submit(["true"], **SMALL) for _ in range(n)]
    submitted = time.perf_counter() - t
    for job in jobs:
        _check(client, job)
    return n / submitted, n / (time.perf_counter() - t)


def bench_cli(address: str, calls: int, tmp: Path) -> list[float]:
    """Wall time of each `rbs job submit -- true` in a shell loop."""
    rbs = Path(sys.executable).with_name("rbs")
    cmd = str(rbs) if rbs.exists() else " ".join(RBS)
    script = (
        f"for i in $(seq {calls}); do s=$(date +%s%N); {cmd} job submit -- true >/dev/null "
        "|| exit 1; e=$(date +%s%N); echo $((e - s)); done"
    )
    env = {**os.environ, "RBS_REMOTE": address}
    # As an installed rbs runs: with compiled bytecode (kept out of the source tree).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    warm = [*cmd.split(), "job", "submit", "--", "true"]
    subprocess.run(warm, env=env, capture_output=True, check=True)
    out = subprocess.run(
        ["sh", "-c", script], env=env, capture_output=True, text=True, check=True
    ).stdout
    return [int(x) / 1e9 for x in out.split()]


def bench_start_latency(client: JobsClient, runs: int) -> list[float]:
    """Submit to the job's first instruction: `date` prints its start time as a log line."""
    out = []
    for _ in range(runs):
        t = time.time()
        job = client.submit(["date", "+%s.%N"], **SMALL)
        _check(client, job)
        (line,) = [x.text for x in client.logs(job) if x.stream == "out"]
        out.append(float(line) - t)
    return out


# Per link of the last chain, in seconds: the previous job's end -> this one's start, as
# the server recorded them (the dependency's release and the dispatch); the dispatch ->
# the job's first instruction (the order reaching the worker, which starts the process);
# that instruction -> the end the server recorded (the process exits, the worker reports).
CHAIN_LINKS: list[tuple[float, float, float]] = []
STAMP = ["date", "+%s.%N"]  # a job as short as `true` that prints when it ran


def bench_chain(client: JobsClient, length: int) -> float:
    t = time.perf_counter()
    prev = client.submit(STAMP, **SMALL)
    jobs = [prev]
    for _ in range(length - 1):
        prev = client.submit(STAMP, deps=f"afterok:{prev}", **SMALL)
        jobs.append(prev)
    _check(client, prev)
    took = time.perf_counter() - t
    times = []
    for job in jobs:
        raw = client.show(job).raw
        (ran,) = [float(x.text) for x in client.logs(job) if x.stream == "out"]
        times.append((raw["start_time"], ran, raw["end_time"]))
    CHAIN_LINKS[:] = [
        (start - times[i - 1][2], ran - start, end - ran)
        for i, (start, ran, end) in enumerate(times)
        if i
    ]
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job-slots", type=int, default=8, help="the worker's job slots")
    ap.add_argument("--runs", type=int, default=3, help="runs per throughput figure")
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--cli-calls", type=int, default=500)
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    ap.add_argument(
        "--durable",
        action="store_true",
        help="serve with [jobs] durable = true (an fsync per journal commit)",
    )
    ap.add_argument("--no-scale", action="store_true", help="skip bench/jobs_scale.py")
    ap.add_argument("--only-scale", action="store_true", help="run bench/jobs_scale.py only")
    args = ap.parse_args()
    if not args.only_scale:
        _small_cluster(args)
    if not args.no_scale:
        import jobs_scale  # bench/ is on sys.path: this script's folder

        jobs_scale.main(["--runs", str(args.runs)])


def _small_cluster(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rbs-bench-jobs-"))
    procs, address = start(tmp, args.job_slots, durable=args.durable)
    SERVER_PID[:] = [procs[1].pid]
    journal = "durable = true (fsync per commit)" if args.durable else "durable = false"
    print(
        f"one local worker, {args.job_slots} job slots, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}; [jobs] {journal}"
    )
    try:
        with JobsClient(address) as client:
            _check(client, client.submit(["true"], **SMALL))  # warm up both processes

            med, runs = _median(args.runs, lambda: bench_array(client, args.tasks))
            print(
                f"array of {args.tasks} `true` tasks, submit to all completed: {med:7.0f} tasks/s"
                f"  (runs: {', '.join(f'{r:.0f}' for r in runs)}; goal >= 200)"
            )
            print(
                "  the server's CPU per task: "
                f"{statistics.median(ARRAY_SERVER_CPU) * 1e3:.2f} ms median "
                f"(runs: {', '.join(f'{c * 1e3:.2f}' for c in ARRAY_SERVER_CPU)})"
            )
            pairs = [bench_one_by_one(client, args.tasks) for _ in range(args.runs)]
            sub = statistics.median(p[0] for p in pairs)
            done = statistics.median(p[1] for p in pairs)
            print(
                f"{args.tasks} `true` jobs one by one (Python client): submitted {sub:7.0f}/s"
                f" (goal >= 1000), all completed {done:5.0f}/s (goal >= 200)"
            )
            cli = bench_cli(address, args.cli_calls, tmp)
            print(
                f"{args.cli_calls} x `rbs job submit -- true` in a shell loop: "
                f"{statistics.median(cli) * 1e3:5.1f} ms per call median, "
                f"p90 {statistics.quantiles(cli, n=10)[-1] * 1e3:5.1f} ms (goal <= 50 ms)"
            )
            for job in client.list_jobs():  # let the CLI's jobs finish: an idle cluster next
                _check(client, job.job_id)
            lat = bench_start_latency(client, 20)
            print(
                f"submit-to-start latency, idle cluster: {statistics.median(lat) * 1e3:5.1f} ms"
                f" median of 20 (min {min(lat) * 1e3:.1f}, max {max(lat) * 1e3:.1f}; goal <= 20)"
            )
            med, runs = _median(args.runs, lambda: bench_chain(client, 20))
            print(
                f"chain of 20 afterok jobs, first submit to last completed: {med:5.3f} s"
                f"  (runs: {', '.join(f'{r:.3f}' for r in runs)}; goal <= 0.4)"
            )
            gaps, starts, ends = (
                statistics.median(x) * 1e3 for x in zip(*CHAIN_LINKS, strict=True)
            )
            print(
                f"  per link of the last chain, medians: previous end -> dispatch {gaps:.1f} ms,"
                f" dispatch -> the job's first instruction {starts:.1f} ms, -> its end recorded"
                f" {ends:.1f} ms"
            )
    finally:
        stop(procs)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
