"""One supervised run's cost on each cgroup backend, and log line throughput.

Drives `SupervisedRun` (the run supervisor's unit of work) on this thread with
`rbs.executor.supervisor_solo.SoloRun`, without the supervisor process or a worker.
For `true`, per backend, the median over RUNS of the wall time from start to its
`Exited` and of this process's CPU time (what the supervisor spends on the run: the
cgroup, the spawn, the spool, the reap), with fresh groups and with groups kept for
reuse (`CgroupPool`, as the supervisor runs them). The job's own CPU (its shim, where
one starts it, and `true`) is not in these figures; bench/worker_cpu.py measures it. Then a job printing
LINES lines: lines spooled per second, and a `read_from` on that spool.

    .venv/bin/python bench/job_runner.py
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from rbs.executor.cgroup_base import CgroupBackend, NullBackend
from rbs.executor.cgroup_pool import CgroupPool
from rbs.executor.cgroup_v2 import V2Backend
from rbs.executor.cgroups import HybridBackend, detect
from rbs.executor.joblog import LogSpool
from rbs.executor.supervisor_proto import RunSpec
from rbs.executor.supervisor_solo import SoloRun

ENV = {"PATH": "/usr/bin:/bin"}
RUNS = 30
LINES = 200_000


def run_once(
    tmp: Path, backend: CgroupBackend, argv: tuple[str, ...], n: int
) -> tuple[float, float]:
    """(wall s, this thread's CPU s) of one run from start to its Exited."""
    folder = tmp / f"run-{n}"
    (folder / "work").mkdir(parents=True)
    spec = RunSpec(
        lease_id=f"bench{n}",
        argv=argv,
        env=ENV,
        cwd=str(folder / "work"),
        spool=str(folder / "log.jsonl"),
        key=f"bench{n}",
        cpus=1.0,
        memory_bytes=256 << 20,
    )
    # This process's CPU, every thread: SoloRun starts the run on a thread of its own.
    t, c = time.perf_counter(), time.process_time()
    exited = SoloRun(spec, backend).start().wait(600)
    if exited.state != "COMPLETED":
        raise SystemExit(f"run {n} ended {exited.state}: {exited.error}")
    return time.perf_counter() - t, time.process_time() - c


def _remove_scope(backend: CgroupBackend) -> None:
    """The bench's own scope folders, once their job groups are gone."""
    if isinstance(backend, HybridBackend):
        _remove_scope(backend.v1)
        _remove_scope(backend.v2)
        return
    bases = [backend.base] if isinstance(backend, V2Backend) else []
    bases += list(getattr(backend, "bases", {}).values())
    for base in set(bases):
        with contextlib.suppress(OSError):
            base.rmdir()


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        n = 0
        print(f"`true`, start to Exited, median of {RUNS}: wall / supervisor CPU per run")
        for kind in ("none", "v1", "hybrid", "v2"):
            inner = detect(kind, scope="bench-job-runner")
            if kind != "none" and isinstance(inner, NullBackend):
                print(f"  {kind:7s} not available: {inner.reason}")
                continue
            for label, backend in (("fresh", inner), ("kept", CgroupPool(inner))):
                n += RUNS
                runs = [run_once(tmp, backend, ("true",), n + i) for i in range(RUNS)]
                wall = statistics.median(r[0] for r in runs) * 1000
                cpu = statistics.median(r[1] for r in runs) * 1000
                print(f"  {kind:7s} {label:5s} {wall:7.2f} ms wall {cpu:6.2f} ms CPU")
                if isinstance(backend, CgroupPool):
                    backend.drain()
            inner.sweep()
            _remove_scope(inner)
        backend = CgroupPool(detect(scope="bench-job-runner"))
        script = ("/bin/sh", "-c", f"seq {LINES}")
        times = [run_once(tmp, backend, script, 10_000 + i)[0] for i in range(3)]
        best = statistics.median(times)
        print(
            f"log throughput ({backend.name}): {LINES} lines in {best:.2f} s median of 3 = "
            f"{LINES / best / 1000:.0f}k lines/s spooled"
        )
        backend.drain()
        _remove_scope(backend.inner)
        with LogSpool(tmp / "run-10000" / "log.jsonl") as spool:
            reads = []
            for seq in (1, LINES // 2, LINES):
                t = time.perf_counter()
                spool.read_from(seq, limit=100)
                reads.append(time.perf_counter() - t)
            print(
                f"read_from(seq, limit=100) on that spool: {statistics.median(reads) * 1e3:.2f} ms"
            )


if __name__ == "__main__":
    main()
