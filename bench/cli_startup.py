"""Start-up time of the hot `rbs` commands, each in a fresh process: median, min and max.

The CLI runs in shell loops (`for f in *; do rbs job submit ...; done`), so the wall
time of one fresh process is part of the product. Goal (issue 12):

    `rbs job submit -- true`, per call, against a named server           <= 30 ms
    the same against the embedded local cluster ($RBS_HOME/local)        <= 30 ms

The jobs commands talk to a server (`rbs remote serve`) and one worker (`rbs remote
worker`) that this script starts on 127.0.0.1 in a temp folder, and to an embedded
cluster started under a temp $RBS_HOME by a first submit (stopped at the end);
`rbs build` runs in a copy of examples/WORKSPACE after one real build, so the timed
calls are no-op builds. Each command runs once unmeasured first, with compiled bytecode
kept in the temp folder, as an installed rbs runs; then the commands take turns. Besides wall time it prints each
process's CPU time (user + system, from wait4), which a loaded machine moves less, and
`python -c pass` as the floor, with the load average, and what pip's console-script
launcher would cost before rbs is imported (`import re`): rbs ships its own, bin/rbs.

    .venv/bin/python bench/cli_startup.py [--runs 15] [--jobs-only]
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
# What the launcher pip writes for a [project.scripts] entry does before it imports its
# package: `import re` (with enum, functools, collections) and one re.sub on argv[0].
# rbs ships its own launcher (bin/rbs) instead; this line shows what that saves.
LAUNCHER = "import re, sys; re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])"


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


def start_cluster(
    tmp: Path, env: dict[str, str], job_slots: int = 4
) -> tuple[list[subprocess.Popen[bytes]], str]:
    """A server and one worker on 127.0.0.1, port 0; returns them and the server address."""
    quiet = ["--log-level", "warning"]
    ready = tmp / "server.ready"
    serve = ["remote", "serve", "--port", "0", "--data-dir", str(tmp / "server")]
    server = _spawn([*serve, "--ready-file", str(ready), *quiet], tmp / "server.log", env)
    address = f"127.0.0.1:{_ready(server, ready, tmp / 'server.log')['port']}"
    ready = tmp / "worker.ready"
    work = ["remote", "worker", "--server", address, "--work-dir", str(tmp / "worker")]
    slots = ["--job-slots", str(job_slots), "--build-slots", "1"]
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


def once(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s: user + system from wait4) of one fresh process, which must succeed."""
    started = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    took = time.perf_counter() - started
    err = p.stderr.read().decode() if p.stderr else ""
    if p.stderr:
        p.stderr.close()
    p.returncode = code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"`{' '.join(cmd)}` failed ({code}):\n{err}")
    return took, usage.ru_utime + usage.ru_stime


def timed(
    cases: list[tuple[list[str], dict[str, str], Path]], runs: int
) -> list[tuple[list[float], list[float]]]:
    """(walls, CPU times) of `runs` fresh processes of each command, after one unmeasured
    call each; the commands take turns, so a change in the machine's load hits them alike."""
    for cmd, env, cwd in cases:
        once(cmd, env, cwd)
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in cases]
    for _ in range(runs):
        for (cmd, env, cwd), (walls, cpus) in zip(cases, out, strict=True):
            wall, cpu = once(cmd, env, cwd)
            walls.append(wall)
            cpus.append(cpu)
    return out


def _command(argv: list[str]) -> list[str]:
    """`rbs ARGV`; for no arguments `python -c pass`, for [LAUNCHER] the launcher alone."""
    if not argv:
        return [sys.executable, "-c", "pass"]
    if argv == [LAUNCHER]:
        return [sys.executable, "-c", LAUNCHER]
    return [*_rbs(), *argv]


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per command")
    ap.add_argument("--jobs-only", action="store_true", help="only the floor and job commands")
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
            [*_rbs(), "job", "submit", "--", "true"], env=env, capture_output=True, text=True
        )
        if first.returncode != 0:
            sys.exit(f"the embedded cluster did not start:\n{first.stderr}")
        submit = ["job", "submit", "--", "true"]
        cases: list[tuple[str, list[str], dict[str, str], Path]] = [
            ("python -c pass (the floor)", [], env, tmp),
            ("pip's launcher, not used (import re)", [LAUNCHER], env, tmp),
            ("rbs job submit -- true (named)", submit, jobs_env, tmp),
            ("rbs job submit -- true (embedded)", submit, env, tmp),
        ]
        if not args.jobs_only:
            first = subprocess.run(
                [*_rbs(), "build", "//greet/..."], cwd=ws, env=env, capture_output=True, text=True
            )
            if first.returncode != 0:
                sys.exit(f"the first build failed:\n{first.stderr}")
            cases += [
                ("rbs --version", ["--version"], env, tmp),
                ("rbs --help", ["--help"], env, tmp),
                ("rbs job --help", ["job", "--help"], env, tmp),
                ("rbs job list", ["job", "list"], jobs_env, tmp),
                ("rbs build //greet/... (no-op)", ["build", "//greet/..."], env, ws),
            ]
        print(f"{args.runs} fresh processes each ({' '.join(_rbs())}); milliseconds")
        print(f"load average at the start: {load()}")
        print(f"{'command':36} {'median':>7} {'min':>7} {'max':>7} {'CPU med':>8}")
        commands = [(_command(argv), case_env, cwd) for _, argv, case_env, cwd in cases]
        for (label, *_), (walls, cpus) in zip(cases, timed(commands, args.runs), strict=True):
            values = [1000 * v for v in walls]
            print(
                f"{label:36} {statistics.median(values):7.1f} "
                f"{min(values):7.1f} {max(values):7.1f} {1000 * statistics.median(cpus):8.1f}",
                flush=True,
            )
        print(f"load average at the end: {load()}")
    finally:
        subprocess.run([*_rbs(), "remote", "down"], env=env, capture_output=True, check=False)
        stop(procs)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
