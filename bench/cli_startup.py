"""Start-up time of the hot `rbs` commands, each in a fresh process: median, min and max.

The CLI runs in shell loops (`for f in *; do rbs job submit ...; done`), so the wall
time of one fresh process is part of the product. Goal:

    `rbs job submit -- true` against a running server, per call   <= 30 ms

The jobs commands talk to a server (`rbs remote serve`) and one worker (`rbs remote
worker`) that this script starts on 127.0.0.1 in a temp folder; `rbs build` runs in a
copy of examples/WORKSPACE after one real build, so the timed calls are no-op builds.
Each command runs once unmeasured first, with compiled bytecode kept in the temp folder,
as an installed rbs runs.

    .venv/bin/python bench/cli_startup.py [--runs 15]
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
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "WORKSPACE"


def _rbs() -> list[str]:
    """The installed console script if there is one, as a user runs it; else `python -m rbs`."""
    script = Path(sys.executable).with_name("rbs")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rbs"]


def _ready(proc: subprocess.Popen[bytes], path: Path, log: Path) -> dict[str, int]:
    """The ready file's JSON once the process has written it (it renames it into place)."""
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


def _spawn(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([*_rbs(), *args], stdout=out, stderr=subprocess.STDOUT, env=env)


def start_cluster(tmp: Path, env: dict[str, str]) -> tuple[list[subprocess.Popen[bytes]], str]:
    """A server and one worker on 127.0.0.1, port 0; returns them and the server address."""
    quiet = ["--log-level", "warning"]
    ready = tmp / "server.ready"
    serve = ["remote", "serve", "--port", "0", "--data-dir", str(tmp / "server")]
    server = _spawn([*serve, "--ready-file", str(ready), *quiet], tmp / "server.log", env)
    address = f"127.0.0.1:{_ready(server, ready, tmp / 'server.log')['port']}"
    ready = tmp / "worker.ready"
    work = ["remote", "worker", "--server", address, "--work-dir", str(tmp / "worker")]
    slots = ["--job-slots", "4", "--build-slots", "1"]
    worker = _spawn([*work, *slots, "--ready-file", str(ready), *quiet], tmp / "worker.log", env)
    _ready(worker, ready, tmp / "worker.log")
    return [worker, server], address


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:  # the worker first, then the server
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def timed(args: list[str], runs: int, env: dict[str, str], cwd: Path) -> list[float]:
    """Wall seconds of `runs` fresh processes of `rbs ARGS`, after one unmeasured call."""
    cmd = [*_rbs(), *args]

    def once() -> float:
        started = time.perf_counter()
        r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        took = time.perf_counter() - started
        if r.returncode != 0:
            sys.exit(f"`rbs {' '.join(args)}` failed ({r.returncode}):\n{r.stderr.decode()}")
        return took

    once()
    return [once() for _ in range(runs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per command")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rbs-cli-bench-"))
    env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["RBS_HOME"] = str(tmp / "home")  # never touch the user's local cluster
    ws = tmp / "ws"
    shutil.copytree(EXAMPLE, ws, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs, address = start_cluster(tmp, env)
        jobs_env = {**env, "RBS_REMOTE": address}
        first = subprocess.run(
            [*_rbs(), "build", "//greet/..."], cwd=ws, env=env, capture_output=True, text=True
        )
        if first.returncode != 0:
            sys.exit(f"the first build failed:\n{first.stderr}")
        cases: list[tuple[str, list[str], dict[str, str], Path]] = [
            ("rbs --version", ["--version"], env, tmp),
            ("rbs --help", ["--help"], env, tmp),
            ("rbs job --help", ["job", "--help"], env, tmp),
            ("rbs job submit -- true", ["job", "submit", "--", "true"], jobs_env, tmp),
            ("rbs job list", ["job", "list"], jobs_env, tmp),
            ("rbs build //greet/... (no-op)", ["build", "//greet/..."], env, ws),
        ]
        print(f"{args.runs} fresh processes each ({' '.join(_rbs())}); milliseconds")
        print(f"{'command':34} {'median':>7} {'min':>7} {'max':>7}")
        for label, argv, case_env, cwd in cases:
            values = [1000 * v for v in timed(argv, args.runs, case_env, cwd)]
            print(
                f"{label:34} {statistics.median(values):7.1f} "
                f"{min(values):7.1f} {max(values):7.1f}",
                flush=True,
            )
    finally:
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
