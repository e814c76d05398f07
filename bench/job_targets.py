"""Benchmark job targets: building the manifest, staging its tree, `rbs job submit //pkg:job`.

A workspace with one ml_training_job whose data are N files (default 500 files, 64 KiB
each, 32 MiB) and one py_binary. Figures (medians): a clean build that writes the
manifest, a no-op rebuild, a rebuild after editing one data file; staging the tree to a
fresh server, staging it again (nothing to send), staging after one changed file; and
`rbs job submit //pkg:job` in a fresh process against a running server (build no-op,
staging no-op, one POST). The server has no worker, so jobs stay PENDING.
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

RBS = [sys.executable, "-m", "rbs"]


def generate(root: Path, files: int, size: int) -> None:
    (root / "WORKSPACE").write_text('workspace(name = "bench")\n')
    app = root / "app"
    (app / "data").mkdir(parents=True)
    for i in range(files):
        (app / "data" / f"part{i:04d}.bin").write_bytes(os.urandom(size))
    (app / "train.py").write_text("import sys\nprint(sys.argv)\n")
    (app / "BUILD").write_text(
        'load("@rbs//job/rules.rbs", "ml_training_job")\n'
        'py_binary(name = "train", srcs = ["train.py"])\n'
        'ml_training_job(name = "job", binary = ":train", data = glob(["data/*.bin"]),\n'
        '                nodes = 2, checkpoint_dir = "ckpt")\n'
    )


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def median(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.1f} ms"


def start_server(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = data / "ready.json"
    proc = subprocess.Popen(
        [
            *RBS,
            "remote",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(data / "server"),
            "--ready-file",
            str(ready),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit("the server did not start")
        time.sleep(0.02)  # a benchmark, not a test: the ready file is the signal
    port = json.loads(ready.read_text())["port"]
    return proc, f"127.0.0.1:{port}"


def bench_staging(root: Path, repeat: int) -> None:
    from rbs.client.jobs import JobsClient
    from rbs.client.targets import build_job_target, stage_manifest_inputs

    first: list[float] = []
    again: list[float] = []
    one: list[float] = []
    sent = 0
    for i in range(repeat):
        with tempfile.TemporaryDirectory(prefix="rbs-bench-srv-") as tmp:
            proc, address = start_server(Path(tmp))
            try:
                with JobsClient(address) as client:
                    manifest, _ = build_job_target("//app:job", cwd=root)
                    t = time.perf_counter()
                    sent = stage_manifest_inputs(client, manifest, cwd=root)
                    first.append(time.perf_counter() - t)
                    t = time.perf_counter()
                    stage_manifest_inputs(client, manifest, cwd=root)
                    again.append(time.perf_counter() - t)
                    (root / "app/data/part0000.bin").write_bytes(os.urandom(64 * 1024 + i))
                    changed, _ = build_job_target("//app:job", cwd=root)
                    t = time.perf_counter()
                    n = stage_manifest_inputs(client, changed, cwd=root)
                    one.append(time.perf_counter() - t)
                    assert n == 4, n  # the file, data/, app/ and the root
            finally:
                proc.terminate()
                proc.wait(10)
    print(f"stage to an empty server ({sent} blobs):  {median(first)}")
    print(f"stage again (nothing missing):        {median(again)}")
    print(f"stage after one data file changed:    {median(one)}  (4 blobs sent)")


def bench_submit(root: Path, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rbs-bench-srv-") as tmp:
        proc, address = start_server(Path(tmp))
        env = {**os.environ, "RBS_REMOTE": address}
        try:
            run([*RBS, "job", "submit", "//app:job"], root, env)  # stage once
            times = [run([*RBS, "job", "submit", "//app:job"], root, env) for _ in range(repeat)]
            flags = [
                run([*RBS, "job", "submit", "//app:job", "--nodes", "1", "--time", "5m"], root, env)
                for _ in range(repeat)
            ]
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"rbs job submit //app:job (fresh process): {median(times)}")
    print(f"  ... with --nodes 1 --time 5m:           {median(flags)}")


def timed(label: str, fn: Callable[[], float], repeat: int) -> None:
    print(f"{label:38s} {median([fn() for _ in range(repeat)])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=500)
    ap.add_argument("--size", type=int, default=64 * 1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="rbs-bench-jobtargets-"))
    try:
        root = base / "ws"
        root.mkdir()
        generate(root, args.files, args.size)
        mb = args.files * args.size / 2**20
        print(f"job target with {args.files} data files ({mb:.0f} MiB), medians of {args.repeat}")

        def clean() -> float:
            shutil.rmtree(root / "rbs-out", ignore_errors=True)
            shutil.rmtree(root / ".rbs", ignore_errors=True)
            return run([*RBS, "build", "//app:job"], root)

        timed("clean build, manifest written:", clean, args.repeat)
        timed("no-op rebuild:", lambda: run([*RBS, "build", "//app:job"], root), args.repeat)

        def edit() -> float:
            (root / "app/data/part0001.bin").write_bytes(os.urandom(args.size))
            return run([*RBS, "build", "//app:job"], root)

        timed("rebuild after one data file changed:", edit, args.repeat)
        manifest = (root / "rbs-out/app/job.job.json").read_bytes()
        clean()
        same = (root / "rbs-out/app/job.job.json").read_bytes() == manifest
        print(f"clean rebuild gives identical bytes:   {'yes' if same else 'NO'}")
        bench_staging(root, args.repeat)
        bench_submit(root, args.repeat)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
