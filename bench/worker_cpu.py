"""Worker CPU per short job: daemon, run supervisor and the job's shim, over arrays of `true`.

Starts a server and one worker as their own processes (bench/jobs.py's `start`), runs
an array of N `true` tasks, and reads from /proc/PID/stat the CPU time (user + system,
every thread) that the worker spent on it. Everything on the worker is counted except
the job's own work:

- the worker daemon (`rbs remote worker`: its asyncio loop, gRPC's threads, its pool);
- the run supervisor (its loop and spawn threads: cgroups, spawn, pipes, spool, reap);
- each job's start ("shim"): the supervisor's reaped children (cutime + cstime) are
  the payload plus what starts it: a job born in its cgroup, the child's few steps
  between its birth and the exec; where a shim starts the job (docs/design/
  job-runner.md), the `/bin/sh` that waits until the job is in its cgroup, then execs
  it. The payload's own CPU, measured in the same run as the children CPU of spawning
  `true` directly, N times, from this process, is taken off.

The server's CPU is not the worker's and is not counted. Prints medians over the
runs and the load average. Goal (issue "Fast at scale"): <= 1.5 ms of worker CPU per
short job.

    .venv/bin/python bench/worker_cpu.py [--tasks 500] [--runs 3] [--job-slots 8]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobs import SMALL, start, stop

from rbs.client.jobs import JobsClient

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> tuple[float, float]:
    """(own, reaped children's) user + system CPU seconds of one process."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    own = int(fields[11]) + int(fields[12])  # utime, stime
    children = int(fields[13]) + int(fields[14])  # cutime, cstime
    return own / TICK, children / TICK


def payload_ms(n: int) -> float:
    """CPU ms of `true` itself, spawned directly (no shim, no cgroup), per run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {"PATH": "/usr/bin:/bin"}
    for _ in range(n):
        pid = os.posix_spawnp("true", ["true"], env, setsid=True)
        os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used / n * 1000


def one_run(client: JobsClient, pids: list[int], n: int) -> dict[str, float]:
    """CPU ms per job of the daemon, the supervisor and the shims; tasks per second."""
    before = [cpu_s(p) for p in pids]
    t0 = time.perf_counter()
    job = client.submit(["true"], array=f"0-{n - 1}", **SMALL)
    info = client.wait(job, timeout=600)
    wall = time.perf_counter() - t0
    if info.state != "COMPLETED":
        sys.exit(f"job {job} ended {info.state}")
    # The last acknowledgements land just after the job is done.
    time.sleep(0.5)
    after = [cpu_s(p) for p in pids]
    (d0, dc0), (s0, sc0) = before
    (d1, dc1), (s1, sc1) = after
    true_ms = payload_ms(n)
    return {
        "daemon": (d1 - d0 + dc1 - dc0) / n * 1000,
        "supervisor": (s1 - s0) / n * 1000,
        "shim": max(0.0, (sc1 - sc0) / n * 1000 - true_ms),
        "payload": true_ms,
        "rate": n / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--job-slots", type=int, default=8)
    args = ap.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="rbs-worker-cpu-") as d:
        tmp = Path(d)
        procs, address = start(tmp, args.job_slots)
        try:
            pids = [procs[0].pid, int((tmp / "worker" / "supervisor.pid").read_text())]
            with JobsClient(address) as client:
                one_run(client, pids, 20)  # warm up
                runs = [one_run(client, pids, args.tasks) for _ in range(args.runs)]
        finally:
            stop(procs)
    load_after = os.getloadavg()

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    total = [r["daemon"] + r["supervisor"] + r["shim"] for r in runs]
    print(
        f"array of {args.tasks} `true` tasks, {args.job_slots} job slots, {args.runs} runs, "
        f"{os.cpu_count()} cores, load average {load[0]:.1f} before, {load_after[0]:.1f} after:"
    )
    print(
        f"  worker CPU per job (daemon + supervisor + shim), median: "
        f"{statistics.median(total):.2f} ms (goal <= 1.5 ms; runs: "
        f"{', '.join(f'{x:.2f}' for x in total)})"
    )
    print(
        f"    daemon {med('daemon'):.2f} ms, supervisor {med('supervisor'):.2f} ms, "
        f"shim {med('shim'):.2f} ms (medians; the payload `true` itself, not counted: "
        f"{med('payload'):.2f} ms)"
    )
    print(f"  throughput, median: {med('rate'):.0f} tasks/s")


if __name__ == "__main__":
    main()
