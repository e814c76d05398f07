"""Benchmark `rbs build` at several sizes: genrules in packages of 10 (chains + fan-in).

Per size (default 200, 1,000, 5,000 and 20,000 targets) it prints, as medians: loading
(parse + evaluate every BUILD file) and analysis in a fresh process with no cache, the
persisted analysis cache read back in a fresh process, a clean build, a no-op rebuild
in a fresh process, and a rebuild after editing one BUILD file; also the analysis alone
after such an edit (the per-package cache at work) and, once, the floor: an empty rule
implementation and starlark-pyo3's own call cost. Then the slope of each
curve: ms per added target (least squares) and the exponent of a log-log fit (1.0 is
linear). `--skip-build` leaves the builds out (loading and analysis only).
"""

from __future__ import annotations

import argparse
import json
import math
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


_PHASES = (
    "import json,sys,time; from pathlib import Path\n"
    "from rbs.build.api import analyze, resolve_patterns\n"
    "from rbs.build.loader import Loader; from rbs.build.workspace import Workspace\n"
    "ws = Workspace(root=Path(sys.argv[1])); c0, t0 = time.process_time(), time.perf_counter()\n"
    "l = Loader(ws); labels = resolve_patterns(l, ['//...'], cwd_package='')\n"
    "c1, t1 = time.process_time(), time.perf_counter(); analyze(l, labels, None)\n"
    "c2, t2 = time.process_time(), time.perf_counter()\n"
    "print(json.dumps([t1 - t0, t2 - t1, c1 - c0, c2 - c1]))\n"
)
_CACHED = (
    "import json,sys,time; from pathlib import Path\n"
    "from rbs.build.driver import _analysis; from rbs.build.state import request_key\n"
    "root = Path(sys.argv[1]); req = request_key(['//...'], '', 'bench')\n"
    "(root / 'rbs-out').mkdir(exist_ok=True); (root / '.rbs/state').mkdir(parents=True, exist_ok=True)\n"
    "t0 = time.perf_counter(); c = _analysis(root, ['//...'], '', req, False)[2]\n"
    "print(json.dumps([time.perf_counter() - t0, c]))\n"
)


_EDITED = (
    "import json,sys,time; from pathlib import Path\n"
    "from rbs.build.driver import _analysis; from rbs.build.state import request_key\n"
    "root = Path(sys.argv[1]); req = request_key(['//...'], '', 'bench'); st = {}\n"
    "c0, t0 = time.process_time(), time.perf_counter()\n"
    "c = _analysis(root, ['//...'], '', req, False, stats=st)[2]\n"
    "print(json.dumps([time.perf_counter() - t0, time.process_time() - c0, c, st]))\n"
)


def edited_analysis(root: Path, build_file: Path, mark: str) -> tuple[float, float, int, int]:
    """(s, CPU s, targets analysed, restored) of //... in a fresh process after an edit to
    one BUILD file: the whole-request cache misses and the per-package one serves."""
    build_file.write_text(build_file.read_text() + f"# {mark}\n")
    out = subprocess.run(
        [sys.executable, "-c", _EDITED, str(root)], capture_output=True, text=True, check=True
    )
    took, cpu, hit, st = json.loads(out.stdout)
    if hit:
        sys.exit("the edit did not invalidate the whole-request analysis cache")
    return float(took), float(cpu), int(st["analysed"]), int(st["restored"])


_FLOOR = (
    "import json,sys,time,timeit; from pathlib import Path\n"
    "import starlark as sl\n"
    "from rbs.build.api import analyze, resolve_patterns\n"
    "from rbs.build.loader import Loader; from rbs.build.workspace import Workspace\n"
    "from rbs.build.starlark_env import GLOBALS\n"
    "root = Path(sys.argv[1]); l = Loader(Workspace(root=root))\n"
    "labels = resolve_patterns(l, ['//...'], cwd_package=''); c = time.process_time()\n"
    "analyze(l, labels, None); per = (time.process_time() - c) / len(labels)\n"
    "m = sl.Module(); sl.eval(m, sl.parse('x.star', 'def f():\\n    return None\\n'"
    "'def g(t):\\n    return len(json.decode(t))\\n'), GLOBALS); fm = m.freeze()\n"
    "text = json.dumps({'attr': {f'a{i}': ['x' * 40] * 3 for i in range(8)}})\n"
    "k = 20000; f = timeit.timeit(lambda: fm.call('f'), number=k) / k\n"
    "g = timeit.timeit(lambda: fm.call('g', text), number=k) / k\n"
    "print(json.dumps([per, f, g, len(text)]))\n"
)


def floor(base: Path, targets: int) -> None:
    """What no change to rbs's Python can remove: a rule whose implementation does
    nothing, analysed as genrules are, and starlark-pyo3's own cost of a call."""
    ws = base / "floor"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / "defs.rbs").write_text(
        "def _impl(ctx):\n    return []\n\nempty = rule(implementation = _impl, attrs = {})\n"
    )
    for p in range(max(1, targets // 10)):
        d = ws / f"p{p:03d}"
        d.mkdir()
        rules = "".join(f'empty(name = "e{i}")\n' for i in range(10))
        (d / "BUILD").write_text('load("//:defs.rbs", "empty")\n' + rules)
    runs = []
    for _ in range(3):
        out = subprocess.run(
            [sys.executable, "-c", _FLOOR, str(ws)], capture_output=True, text=True, check=True
        )
        runs.append(json.loads(out.stdout))
    med = statistics.median
    print(
        f"floor: an empty rule implementation through the analyser "
        f"{1000 * med(r[0] for r in runs):.3f} ms CPU/target; starlark-pyo3 alone: a call of "
        f"an empty function {1e6 * med(r[1] for r in runs):.1f} us, a call that decodes a "
        f"{runs[0][3]}-character JSON text {1e6 * med(r[2] for r in runs):.1f} us",
        flush=True,
    )


def phases(root: Path) -> tuple[float, float, float, float]:
    """(loading s, analysis s, their CPU s) of //... in a fresh process, nothing cached."""
    out = subprocess.run(
        [sys.executable, "-c", _PHASES, str(root)], capture_output=True, text=True, check=True
    )
    load, analysis, load_cpu, analysis_cpu = json.loads(out.stdout)
    return float(load), float(analysis), float(load_cpu), float(analysis_cpu)


def cached_analysis(root: Path) -> float:
    """Seconds to read back the persisted analysis of //... in a fresh process."""
    for _ in range(2):  # the first call saves it (the bench request is its own key)
        out = subprocess.run(
            [sys.executable, "-c", _CACHED, str(root)], capture_output=True, text=True, check=True
        )
        took, hit = json.loads(out.stdout)
    if not hit:
        sys.exit("the analysis cache was not used on the second read")
    return float(took)


def slope(ns: list[int], ts: list[float]) -> tuple[float, float]:
    """(ms per target by least squares, log-log exponent)."""
    mx, my = statistics.mean(ns), statistics.mean(ts)
    per = sum((n - mx) * (t - my) for n, t in zip(ns, ts, strict=True))
    per /= sum((n - mx) ** 2 for n in ns)
    lx = [math.log(n) for n in ns]
    ly = [math.log(max(t, 1e-9)) for t in ts]
    lmx, lmy = statistics.mean(lx), statistics.mean(ly)
    exp = sum((a - lmx) * (b - lmy) for a, b in zip(lx, ly, strict=True))
    exp /= sum((a - lmx) ** 2 for a in lx)
    return 1000 * per, exp


def measure(base: Path, size: int, args: argparse.Namespace) -> dict[str, float]:
    ws = base / f"ws{size}"
    ws.mkdir()
    packages = max(1, size // args.per_package)
    n = generate(ws, packages, args.per_package)
    med = statistics.median
    runs = [phases(ws) for _ in range(args.runs)]
    fig = {
        "n": n,
        "load": med(r[0] for r in runs),
        "analysis": med(r[1] for r in runs),
        "load_cpu": med(r[2] for r in runs),
        "analysis_cpu": med(r[3] for r in runs),
        "cached": med(cached_analysis(ws) for _ in range(args.runs)),
    }
    edited = [
        edited_analysis(ws, ws / f"p{(r * 37) % packages:03d}" / "BUILD", f"analysis edit {r}")
        for r in range(args.runs)
    ]
    fig["edited"] = med(e[0] for e in edited)
    fig["edited_cpu"] = med(e[1] for e in edited)
    fig["edited_analysed"] = med(e[2] for e in edited)
    if not args.skip_build:
        build = [*RBS, "build", "//...", "-j", str(args.jobs), "--plain"]
        fig["clean"] = timed(build, ws)
        fig["clean_cpu"] = CPU[-1]
        fig["noop"] = med(timed(build, ws) for _ in range(max(3, args.runs)))
        edits = []
        for r in range(args.runs):
            build_file = ws / f"p{(r * 37) % packages:03d}" / "BUILD"
            build_file.write_text(build_file.read_text() + f"# edit {r}\n")
            edits.append(timed(build, ws))
        fig["edit"] = med(edits)
    load_now = os.getloadavg()[0]
    line = (
        f"{n:>6} targets: loading {1000 * fig['load'] / n:.3f} ms/target "
        f"({1000 * fig['load_cpu'] / n:.3f} CPU), "
        f"analysis {1000 * fig['analysis'] / n:.3f} ms/target "
        f"({1000 * fig['analysis_cpu'] / n:.3f} CPU), "
        f"cached analysis {1000 * fig['cached'] / n:.3f} ms/target ({fig['cached']:.3f} s), "
        f"analysis after editing one BUILD {fig['edited']:.3f} s ({fig['edited_cpu']:.3f} s CPU, "
        f"{fig['edited_analysed']:.0f} targets analysed, the rest restored)"
    )
    if "noop" in fig:
        line += (
            f", clean build {fig['clean']:.1f} s ({1000 * fig['clean'] / n:.1f} ms/action, "
            f"{1000 * fig['clean_cpu'] / n:.1f} ms CPU), no-op (fresh process) "
            f"{fig['noop']:.3f} s, edit one BUILD {fig['edit']:.2f} s"
        )
    print(f"{line}; load average {load_now:.1f}", flush=True)
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="200,1000,5000,20000", help="targets, comma-separated")
    ap.add_argument("--per-package", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-build", action="store_true", help="loading and analysis only")
    ap.add_argument("--no-floor", action="store_true", help="leave out the empty-rule floor")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    sizes = sorted(int(x) for x in args.sizes.split(","))
    base = Path(tempfile.mkdtemp(prefix="rbs-bench-"))
    print(
        f"rbs build, genrules in packages of {args.per_package}, medians of {args.runs} runs, "
        f"-j {args.jobs}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    try:
        if not args.no_floor:
            floor(base, min(sizes[-1], 5000))
        figs = [measure(base, size, args) for size in sizes]
        if len(figs) < 2:
            return
        ns = [int(f["n"]) for f in figs]
        curves = ["load", "analysis", "load_cpu", "analysis_cpu", "cached", "edited"]
        curves += ["edited_cpu"] + (["noop", "clean"] if "noop" in figs[0] else [])
        for name in curves:
            per, exp = slope(ns, [f[name] for f in figs])
            print(f"slope {name:>8}: {per:.4f} ms per added target, log-log exponent {exp:.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
