"""Worker CPU per short job: daemon plus run supervisor, over arrays of `true` tasks.

Starts a server and one worker as their own processes (bench/jobs.py's `start`), runs
an array of N `true` tasks, and reads the CPU time (user + system, from
/proc/PID/stat) that the worker daemon and its run supervisor spent on it, without
the jobs' own processes. Prints the median per job over the runs. Goal (issue "Fast
at scale"): <= 1.5 ms of worker CPU per short job.

    .venv/bin/python bench/worker_cpu.py [--tasks 500] [--runs 3] [--job-slots 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jobs import SMALL, start, stop

from rbs.client.jobs import JobsClient

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (its own, not its children's)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def one_run(client: JobsClient, pids: list[int], n: int) -> tuple[list[float], float]:
    """CPU ms per job of each process in `pids`, and tasks per second."""
    before = [cpu_s(p) for p in pids]
    t0 = time.perf_counter()
    job = client.submit(["true"], array=f"0-{n - 1}", **SMALL)
    info = client.wait(job, timeout=600)
    wall = time.perf_counter() - t0
    if info.state != "COMPLETED":
        sys.exit(f"job {job} ended {info.state}")
    # The last acknowledgements land just after the job is done.
    time.sleep(0.5)
    return [(cpu_s(p) - b) / n * 1000 for p, b in zip(pids, before, strict=True)], n / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--job-slots", type=int, default=8)
    args = ap.parse_args()
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
    total = [sum(r[0]) for r in runs]
    daemon = statistics.median(r[0][0] for r in runs)
    supervisor = statistics.median(r[0][1] for r in runs)
    print(f"array of {args.tasks} `true` tasks, {args.job_slots} job slots, {args.runs} runs:")
    print(
        f"  worker CPU per job (daemon + supervisor), median: {statistics.median(total):.2f} ms "
        f"(goal <= 1.5 ms; runs: {', '.join(f'{x:.2f}' for x in total)})"
    )
    print(f"    daemon {daemon:.2f} ms, supervisor {supervisor:.2f} ms (medians)")
    print(f"  throughput, median: {statistics.median(r[1] for r in runs):.0f} tasks/s")


if __name__ == "__main__":
    main()
