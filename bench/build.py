"""Benchmark `rbs build`: 1,000 genrules in 100 packages (chains + fan-in); prints medians.

Figures: clean build (ms per action), no-op rebuild in a fresh process, rebuild after
editing one leaf source, and loading alone (parse + evaluate every BUILD file).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RBS = [sys.executable, "-m", "rbs"]


def generate(root: Path, packages: int, per_package: int) -> int:
    """Write the workspace; returns the number of genrule targets."""
    (root / "WORKSPACE").write_text("")
    n = 0
    for p in range(packages):
        d = root / f"p{p:03d}"
        d.mkdir()
        (d / "in.txt").write_text(f"leaf {p}\n")
        rules = ['genrule(name = "g0", srcs = ["in.txt"], outs = ["o0.txt"], cmd = "cat $< > $@")']
        for i in range(1, per_package - 1):
            rules.append(
                f'genrule(name = "g{i}", srcs = [":o{i - 1}.txt"], outs = ["o{i}.txt"], '
                f'cmd = "cat $< > $@ && echo {i} >> $@")'
            )
        chain = ", ".join(f'":o{i}.txt"' for i in range(per_package - 1))
        rules.append(
            f'genrule(name = "fan", srcs = [{chain}], outs = ["fan.txt"], cmd = "cat $(SRCS) > $@")'
        )
        (d / "BUILD").write_text("\n".join(rules) + "\n")
        n += per_package
    top = root / "top"
    top.mkdir()
    srcs = ", ".join(f'"//p{p:03d}:fan.txt"' for p in range(packages))
    (top / "BUILD").write_text(
        f'genrule(name = "all", srcs = [{srcs}], outs = ["all.txt"], cmd = "cat $(SRCS) | wc -l > $@")\n'
    )
    return n + 1


CPU: list[float] = []  # CPU seconds (user + system) of each timed command, children included


def timed(cmd: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    if proc.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return took


def loading_time(root: Path) -> float:
    code = (
        "import time,sys; from pathlib import Path\n"
        "from rbs.build.loader import Loader; from rbs.build.workspace import Workspace\n"
        f"ws = Workspace(root=Path({str(root)!r})); t = time.perf_counter(); l = Loader(ws)\n"
        "for p in ws.packages(): l.package(p)\n"
        "print(time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--packages", type=int, default=100)
    ap.add_argument("--per-package", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rbs-bench-"))
    try:
        ws = base / "ws"
        ws.mkdir()
        n = generate(ws, args.packages, args.per_package)
        build = [*RBS, "build", "//...", "-j", str(args.jobs), "--plain"]
        clean, clean_cpu, noop, leaf, load = [], [], [], [], []
        load_avg = os.getloadavg()[0]
        for r in range(args.runs):
            shutil.rmtree(ws / ".rbs", ignore_errors=True)
            shutil.rmtree(ws / "rbs-out", ignore_errors=True)
            clean.append(timed(build, ws))
            clean_cpu.append(CPU[-1])
            for _ in range(3):
                noop.append(timed(build, ws))
            leaf_file = ws / f"p{(r * 37) % args.packages:03d}" / "in.txt"
            leaf_file.write_text(leaf_file.read_text() + f"edit {r}\n")
            leaf.append(timed(build, ws))
            load.append(loading_time(ws))
        med = statistics.median
        print(
            f"workspace: {n} genrule targets in {args.packages + 1} packages, -j {args.jobs}, "
            f"{args.runs} runs, load average {load_avg:.1f} -> {os.getloadavg()[0]:.1f} "
            f"on {os.cpu_count()} cores"
        )
        print(
            f"clean build:            median {med(clean):.2f} s  ({1000 * med(clean) / n:.1f} ms "
            f"per action; {1000 * med(clean_cpu) / n:.1f} ms CPU per action)"
        )
        print(f"no-op rebuild (fresh):  median {med(noop):.3f} s")
        print(f"edit one leaf, rebuild: median {med(leaf):.3f} s")
        print(
            f"loading (parse+eval):   median {1000 * med(load):.0f} ms for {args.packages + 1} BUILD files"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
