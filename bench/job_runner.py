"""Job runner figures: per-job overhead on each cgroup backend, and log line throughput."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from rbs.executor.cgroup_base import CgroupBackend, NullBackend
from rbs.executor.cgroups import detect
from rbs.executor.joblog import LogSpool
from rbs.executor.jobproc import JobRunner
from rbs.executor.jobspec import JobSpec

ENV = {"PATH": "/usr/bin:/bin"}
RUNS = 30
LINES = 200_000


def run_once(tmp: Path, backend: CgroupBackend, argv: tuple[str, ...], n: int) -> float:
    with LogSpool(tmp / f"log-{n}.jsonl") as spool:
        spec = JobSpec(
            job_id=f"bench{n}", argv=argv, workdir=tmp, env=ENV, memory_bytes=256 << 20, cpus=1
        )
        t = time.perf_counter()
        JobRunner(spec, spool=spool, backend=backend).run()
        return time.perf_counter() - t


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(f"job `true`, start to outcome, median of {RUNS} (includes cgroup create/remove):")
        for kind in ("none", "v1", "hybrid", "v2"):
            backend = detect(kind)
            if kind != "none" and isinstance(backend, NullBackend):
                print(f"  {kind:7s} not available: {backend.reason}")
                continue
            times = [run_once(tmp, backend, ("true",), i) for i in range(RUNS)]
            print(f"  {kind:7s} {statistics.median(times) * 1000:7.2f} ms")
        script = f"seq {LINES}"
        backend = detect()
        times = [run_once(tmp, backend, ("/bin/sh", "-c", script), 1000 + i) for i in range(3)]
        best = statistics.median(times)
        print(
            f"log throughput ({backend.name}): {LINES} lines in {best:.2f} s median of 3 = "
            f"{LINES / best / 1000:.0f}k lines/s spooled"
        )
        with LogSpool(tmp / "log-1000.jsonl") as spool:
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
