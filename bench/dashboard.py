"""Dashboard pages at scale: the time to serve each page of `rbs remote serve`'s dashboard
with N jobs in the journal (N up to 100,000), median of several requests, from a warm server.

    /ui/jobs (first page, filters, sorts, a page far down)  < 300 ms at 100,000 jobs
    a job's page, the queues page, the workers page          < 300 ms at 100,000 jobs

The journals are written as bench/jobs_scale.py writes them (pending jobs, no worker) and a
real server is started on each; the server has no tokens, so 127.0.0.1 needs no login.

    .venv/bin/python bench/dashboard.py [--sizes 1000,100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from html import unescape
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from jobs_scale import _serve, _stop, write_journal

NEXT = re.compile(r'href="([^"]+)" id="next"')


def _get(base: str, path: str) -> tuple[float, str]:
    t = time.perf_counter()
    with urllib.request.urlopen(base + path, timeout=120) as resp:
        body = resp.read().decode()
    return time.perf_counter() - t, body


def _median(base: str, path: str, runs: int) -> tuple[float, str]:
    _get(base, path)  # warm
    times, body = [], ""
    for _ in range(runs):
        t, body = _get(base, path)
        times.append(t)
    return statistics.median(times), body


def bench(tmp: Path, n: int, runs: int) -> dict[str, float]:
    data = tmp / f"dash-{n}"
    write_journal(data, n)
    proc, _port, http = _serve(data, tmp / f"dash-{n}.log")
    base = f"http://127.0.0.1:{http}"
    figures: dict[str, float] = {}
    try:
        _, first = _get(base, "/ui/jobs")
        deep = "/ui/jobs"
        for _ in range(20):  # 20 pages down, through the cursors
            m = NEXT.search(first)
            if m is None:
                break
            deep = unescape(m.group(1))
            _, first = _get(base, deep)
        pages = {
            "jobs, first page": "/ui/jobs",
            "jobs, state=PENDING": "/ui/jobs?state=PENDING",
            "jobs, name glob": "/ui/jobs?name=job-99*",
            "jobs, sort=priority": "/ui/jobs?sort=priority&order=desc",
            "jobs, a later page": deep,  # up to 20 pages down
            "a job's page": f"/ui/jobs/{n // 2}",
            "queues": "/ui/queues",
            "workers": "/ui/workers",
        }
        for label, path in pages.items():
            t, body = _median(base, path, runs)
            assert "<main" in body, f"{path}: {body[:200]}"
            figures[label] = t
            print(f"  {n:>7,} jobs  {label:<22} {t * 1e3:7.1f} ms")
    finally:
        _stop(proc)
        shutil.rmtree(data, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,100000", help="job counts")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="rbs-bench-dash-"))
    try:
        results = {n: bench(tmp, n, args.runs) for n in sizes}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    small, big = sizes[0], sizes[-1]
    worst = max(results[big].items(), key=lambda kv: kv[1])
    print(
        f"dashboard: slowest page at {big:,} jobs: {worst[0]} {worst[1] * 1e3:.0f} ms "
        "(goal < 300 ms)"
    )
    if small != big:
        ratio = statistics.median(results[big][k] / results[small][k] for k in results[big])
        print(f"dashboard: median ratio of page times, {big:,} / {small:,} jobs: {ratio:.2f}")


if __name__ == "__main__":
    main()
