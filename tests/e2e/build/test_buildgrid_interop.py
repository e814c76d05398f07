"""rbs and BuildGrid (from PyPI, in its own venv), both ways: `rbs build --remote-cache-only`
against BuildGrid's CAS + action cache server, and BuildGrid's `bgd operation` against
`rbs remote serve`."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from buildgrid import bgd, cache_server
from exec_cluster import Cluster
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.wire.reapi_client import RemoteStore, connect

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "WORKSPACE"
OUTPUTS = ("greet/banner.txt", "greet/count.txt", "greet/upper.txt", "big/big.sum")


def rbs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _workspace(dest: Path, data: bytes) -> Path:
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    (dest / "big").mkdir()
    (dest / "big" / "data.bin").write_bytes(data)  # over BuildGrid's 4 MB batch limit
    (dest / "big" / "BUILD").write_text(
        'genrule(name = "big", srcs = ["data.bin"], outs = ["big.sum"], '
        'cmd = "wc -c < $< > $@ && cat $< $< | cksum >> $@")\n'
    )
    return dest


def _hits(stderr: str) -> int:
    m = re.search(r"(\d+) run, (\d+) cache hits", stderr)
    assert m, stderr
    return int(m[2])


def test_rbs_build_against_buildgrids_cache(tmp_path: Path) -> None:
    data = os.urandom(1 << 20) * 5
    local = _workspace(tmp_path / "local", data)
    r = rbs(local, "build", "//greet/...", "//big")
    assert r.returncode == 0, r.stderr
    with cache_server(tmp_path / "bgd") as port:
        ws = _workspace(tmp_path / "ws", data)
        remote = ("--remote", f"127.0.0.1:{port}", "--remote-cache-only")
        r = rbs(ws, "build", "//greet/...", "//big", *remote)
        assert r.returncode == 0, r.stderr
        assert _hits(r.stderr) == 0
        for out in OUTPUTS:
            assert (ws / "rbs-out/bin" / out).read_bytes() == (
                local / "rbs-out/bin" / out
            ).read_bytes()
        # A second checkout gets every action from BuildGrid's action cache.
        other = _workspace(tmp_path / "other", data)
        r = rbs(other, "build", "//greet/...", "//big", *remote)
        assert r.returncode == 0, r.stderr
        assert _hits(r.stderr) >= 4
        for out in OUTPUTS:
            assert (other / "rbs-out/bin" / out).read_bytes() == (
                local / "rbs-out/bin" / out
            ).read_bytes()
        # BuildGrid offers SHA256 only and no execution: both said plainly.
        r = rbs(other, "build", "//greet:upper", *remote, "--digest-function", "blake3")
        assert r.returncode == 1
        assert "--digest-function blake3: the server does not offer it; it offers sha256" in (
            r.stderr
        )
        r = rbs(other, "build", "//greet:upper", "--remote", f"127.0.0.1:{port}")
        assert r.returncode == 1 and "does not offer remote execution" in r.stderr
        assert "Traceback" not in r.stderr


def _bgd(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bgd()), "operation", "--remote", f"http://127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bgd_operation_commands_against_rbs(tmp_path: Path) -> None:
    bgd()  # install (or skip) before starting anything
    cluster = Cluster(tmp_path / "cluster", build_slots=1)
    (tmp_path / "cluster").mkdir()
    cluster.start()
    try:
        with connect(f"127.0.0.1:{cluster.port}") as ch:
            digest = make_action(RemoteStore(ch), ["/bin/sh", "-c", "sleep 60"])
            request = re_pb2.ExecuteRequest(
                action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
                digest_function=re_pb2.DigestFunction.BLAKE3,
            )
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                stream = pool.submit(
                    lambda: list(re_grpc.ExecutionStub(ch).Execute(request, timeout=120))
                )
                deadline = time.monotonic() + 60
                listed = _bgd(cluster.port, "list")
                while "Executing: operations/" not in listed.stdout:
                    assert time.monotonic() < deadline, listed.stdout + listed.stderr
                    assert "Method not found" not in listed.stderr, listed.stderr
                    listed = _bgd(cluster.port, "list")
                m = re.search(r"Executing: (operations/[0-9a-f-]+)", listed.stdout)
                assert m, listed.stdout
                name = m[1]
                status = _bgd(cluster.port, "status", name)
                assert status.returncode == 0 and f"Executing: {name}" in status.stdout
                cancel = _bgd(cluster.port, "cancel", name)
                assert cancel.returncode == 0, cancel.stderr
                ops = stream.result(timeout=60)
            resp = re_pb2.ExecuteResponse()
            assert ops[-1].done and ops[-1].response.Unpack(resp)
            assert resp.status.code == grpc.StatusCode.CANCELLED.value[0]
            done = _bgd(cluster.port, "list", "--filter", "stage=COMPLETED")
            assert name in done.stdout, done.stdout + done.stderr
            bad = _bgd(cluster.port, "list", "--filter", "worker=x")
            assert "unsupported filter" in bad.stderr
    finally:
        cluster.stop()
