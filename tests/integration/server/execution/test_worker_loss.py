"""A worker killed mid-action: the action re-runs on another worker, the caller gets the result."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from exec_harness import Cluster
from google.rpc import code_pb2
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteStore, connect


def _spawn_worker(cluster: Cluster, tmp: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    ready = tmp / f"{name}.ready"
    log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rbs",
            "remote",
            "worker",
            "--server",
            f"127.0.0.1:{cluster.port}",
            "--work-dir",
            str(tmp / name),
            "--name",
            name,
            "--build-slots",
            "1",
            "--ready-file",
            str(ready),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((tmp / f"{name}.log").read_text())
        if ready.exists():
            try:
                return proc, json.loads(ready.read_text())["worker_id"]
            except ValueError:
                pass
        time.sleep(0.02)
    proc.kill()
    raise TimeoutError(f"worker {name} did not register")


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[Cluster, dict[str, subprocess.Popen[bytes]]]]:
    cluster = Cluster(tmp_path / "server")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("w1", "w2"):
            proc, wid = _spawn_worker(cluster, tmp_path, name)
            procs[wid] = proc
        cluster.wait_workers(2)
        yield cluster, procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=20)
        cluster.stop()


def test_killed_worker_action_reruns_on_another(
    two_workers: tuple[Cluster, dict[str, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    cluster, procs = two_workers
    pids = tmp_path / "pids"
    channel = connect(cluster.target)
    cas = RemoteStore(channel)
    digest = make_action(
        cas,
        ["/bin/sh", "-c", f"echo $$ >> {pids}; sleep 2; echo finished > out.txt"],
        outputs=["out.txt"],
    )
    req = re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
        digest_function=re_pb2.DigestFunction.BLAKE3,
    )
    stream = re_grpc.ExecutionStub(channel).Execute(req, timeout=60)
    status = w_grpc.WorkersStub(channel)
    # Wait until one worker is running it, then SIGKILL that worker (its pid only).
    deadline = time.monotonic() + 20
    busy = None
    while busy is None and time.monotonic() < deadline:
        for w in status.Status(w_pb2.StatusRequest()).workers:
            if w.build_slots_used:
                busy = w.worker_id
        time.sleep(0.02)
    assert busy is not None
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(procs[busy].pid, signal.SIGKILL)
    procs[busy].wait(timeout=10)

    ops = list(stream)
    resp = re_pb2.ExecuteResponse()
    assert ops[-1].done and ops[-1].response.Unpack(resp)
    assert resp.status.code == code_pb2.OK, resp.status.message
    (out,) = resp.result.output_files
    assert (
        cas.get(
            Digest(function=DigestFunction.BLAKE3, hash=out.digest.hash, size=out.digest.size_bytes)
        )
        == b"finished\n"
    )
    other = next(wid for wid in procs if wid != busy)
    names = {p.args[p.args.index("--name") + 1] for wid, p in procs.items() if wid == other}  # type: ignore[union-attr]
    assert resp.result.execution_metadata.worker in names
    assert len(pids.read_text().split()) == 2  # it ran twice: once per worker
    view = {w.worker_id: w.state for w in status.Status(w_pb2.StatusRequest()).workers}
    assert view[busy] == "LOST" and view[other] == "CONNECTED"
    # The killed worker's orphaned command was started by this test: end it by pid.
    first_pid = int(pids.read_text().split()[0])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(first_pid, signal.SIGKILL)
    channel.close()


def test_silent_worker_is_lost_after_its_heartbeats_stop(
    two_workers: tuple[Cluster, dict[str, subprocess.Popen[bytes]]], tmp_path: Path
) -> None:
    """A frozen worker keeps its connection open but stops heartbeating (SIGSTOP)."""
    cluster, procs = two_workers
    pids = tmp_path / "pids"
    channel = connect(cluster.target)
    cas = RemoteStore(channel)
    digest = make_action(cas, ["/bin/sh", "-c", f"echo $$ >> {pids}; sleep 1; echo ok"], outputs=[])
    req = re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
        digest_function=re_pb2.DigestFunction.BLAKE3,
    )
    stream = re_grpc.ExecutionStub(channel).Execute(req, timeout=60)
    status = w_grpc.WorkersStub(channel)
    deadline = time.monotonic() + 20
    busy = None
    while busy is None and time.monotonic() < deadline:
        busy = next(
            (
                w.worker_id
                for w in status.Status(w_pb2.StatusRequest()).workers
                if w.build_slots_used
            ),
            None,
        )
        time.sleep(0.02)
    assert busy is not None
    os.kill(procs[busy].pid, signal.SIGSTOP)
    try:
        ops = list(stream)
        resp = re_pb2.ExecuteResponse()
        assert ops[-1].response.Unpack(resp)
        assert resp.status.code == code_pb2.OK, resp.status.message
        view = {w.worker_id: w.state for w in status.Status(w_pb2.StatusRequest()).workers}
        assert view[busy] == "LOST"
    finally:
        os.kill(procs[busy].pid, signal.SIGCONT)
    # Thawed, the worker reconnects; its late result is ignored (the operation is done).
    cluster.wait_workers(2)
    channel.close()
