"""Benchmark REAPI Execute round trips on a local cluster; prints medians in ms.

Figures: Execute of a trivial action that the action cache answers (cached), and of a
new trivial action each time (uncached: queue, lease to the worker, sandbox, run
/bin/true, upload, report, cache). The server runs `rbs remote serve` and the worker
`rbs remote worker`, each as its own process, as in a real deployment.
"""

from __future__ import annotations

import argparse
import json
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.tree import build_tree
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteStore, connect

RBS = [sys.executable, "-m", "rbs"]


def start(tmp: Path) -> tuple[list[subprocess.Popen[str]], int]:
    server = subprocess.Popen(
        [
            *RBS,
            "remote",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(tmp / "server"),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], 30)
    m = re.search(r"serving on [\d.]+:(\d+)", server.stdout.readline() if ready else "")
    if not m:
        server.kill()
        raise SystemExit("the server did not start")
    port = int(m[1])
    ready_file = tmp / "worker.ready"
    worker = subprocess.Popen(
        [
            *RBS,
            "remote",
            "worker",
            "--server",
            f"127.0.0.1:{port}",
            "--work-dir",
            str(tmp / "w"),
            "--ready-file",
            str(ready_file),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not ready_file.exists():
        if time.monotonic() > deadline or worker.poll() is not None:
            raise SystemExit("the worker did not register")
        time.sleep(0.01)
    json.loads(ready_file.read_text())
    return [worker, server], port


def action(store: RemoteStore, n: int) -> Digest:
    fn = DigestFunction.BLAKE3
    command = re_pb2.Command(
        arguments=["/bin/true", str(n)],
        environment_variables=[re_pb2.Command.EnvironmentVariable(name="PATH", value="/bin")],
    )
    cd = store.put_message(command, fn)
    root = build_tree(store, {}, function=fn)
    msg = re_pb2.Action(
        command_digest=re_pb2.Digest(hash=cd.hash, size_bytes=cd.size),
        input_root_digest=re_pb2.Digest(hash=root.hash, size_bytes=root.size),
    )
    return store.put_message(msg, fn)


def execute_ms(stub: re_grpc.ExecutionStub, d: Digest) -> tuple[float, bool]:
    req = re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=d.hash, size_bytes=d.size),
        digest_function=re_pb2.DigestFunction.BLAKE3,
    )
    t0 = time.perf_counter()
    ops = list(stub.Execute(req, timeout=60))
    ms = (time.perf_counter() - t0) * 1000
    resp = re_pb2.ExecuteResponse()
    ops[-1].response.Unpack(resp)
    assert resp.status.code == 0 and resp.result.exit_code == 0, resp.status.message
    return ms, resp.cached_result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=40, help="round trips per figure")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        procs, port = start(Path(tmp))
        try:
            channel = connect(f"127.0.0.1:{port}")
            store = RemoteStore(channel)
            stub = re_grpc.ExecutionStub(channel)
            warm = action(store, -1)
            execute_ms(stub, warm)  # warm up: connections, first sandbox
            uncached, cached = [], []
            for i in range(args.n):
                ms, hit = execute_ms(stub, action(store, i))
                assert not hit
                uncached.append(ms)
            for _ in range(args.n):
                ms, hit = execute_ms(stub, warm)
                assert hit
                cached.append(ms)
            # Throughput: 16 concurrent callers (Bazel's --jobs=16), each action new.
            todo = [action(store, 10_000 + i) for i in range(args.n * 4)]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                results = list(pool.map(lambda d: execute_ms(stub, d), todo))
            wall = time.perf_counter() - t0
            assert not any(hit for _, hit in results)
            channel.close()
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=20)
    print(
        f"Execute round trip, cached action (action cache hit): {statistics.median(cached):7.2f} ms median of {args.n}"
    )
    print(
        f"Execute round trip, uncached trivial action (/bin/true): {statistics.median(uncached):7.2f} ms median of {args.n}"
    )
    each = statistics.median(ms for ms, _ in results)
    print(
        f"Throughput, 16 concurrent callers, {len(todo)} new trivial actions: "
        f"{len(todo) / wall:7.1f} actions/s ({each:.1f} ms median each)"
    )


if __name__ == "__main__":
    main()
