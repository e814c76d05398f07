"""`rbs build --remote` against a server that is not configured like rbs's default:
SHA256 only (`rbs remote serve --digest-function sha256`) and a named instance."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from exec_cluster import Cluster

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


def _workspace(dest: Path) -> Path:
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    (dest / "big").mkdir()
    # Over every batch limit: it travels by ByteStream (zstd, since rbs offers it).
    (dest / "big" / "data.bin").write_bytes(os.urandom(1 << 20) * 5)
    (dest / "big" / "BUILD").write_text(
        'genrule(name = "big", srcs = ["data.bin"], outs = ["big.sum"], '
        'cmd = "wc -c < $< > $@ && cat $< $< | cksum >> $@")\n'
    )
    return dest


def _counts(stderr: str) -> tuple[int, int]:
    m = re.search(r"(\d+) run, (\d+) cache hits", stderr)
    assert m, stderr
    return int(m[1]), int(m[2])


def _clean(ws: Path) -> None:
    shutil.rmtree(ws / ".rbs")
    shutil.rmtree(ws / "rbs-out")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path / "cluster",
        server_args=("--digest-function", "sha256", "--instance-name", "foo"),
        build_slots=2,
    )
    (tmp_path / "cluster").mkdir()
    c.start()
    yield c
    c.stop()


def test_remote_execution_on_a_sha256_server_with_an_instance_name(
    tmp_path: Path, cluster: Cluster
) -> None:
    local = _workspace(tmp_path / "local")
    r = rbs(local, "build", "//greet/...", "//big")
    assert r.returncode == 0, r.stderr
    ws = _workspace(tmp_path / "ws")
    shutil.copy(local / "big" / "data.bin", ws / "big" / "data.bin")
    remote = ("--remote", f"127.0.0.1:{cluster.port}")

    r = rbs(ws, "build", "//greet/...", "//big", *remote, "--remote-instance-name", "foo")
    assert r.returncode == 0, r.stderr
    for out in OUTPUTS:
        assert (ws / "rbs-out/bin" / out).read_bytes() == (local / "rbs-out/bin" / out).read_bytes()
    ran, hits = _counts(r.stderr)
    assert hits == 0 and ran >= 4

    # A fresh checkout finds every executed action in instance foo's action cache.
    _clean(ws)
    r = rbs(ws, "build", "//greet/...", "//big", *remote, "--remote-instance-name", "foo")
    assert r.returncode == 0, r.stderr
    assert _counts(r.stderr)[1] >= 4
    assert (ws / "rbs-out/bin/big/big.sum").read_bytes() == (
        local / "rbs-out/bin/big/big.sum"
    ).read_bytes()

    # The default instance is served too, with an action cache of its own.
    _clean(ws)
    r = rbs(ws, "build", "//greet/...", *remote)
    assert r.returncode == 0, r.stderr
    assert _counts(r.stderr)[1] == 0


def test_forced_digest_function_the_server_lacks(tmp_path: Path, cluster: Cluster) -> None:
    ws = _workspace(tmp_path / "ws")
    r = rbs(
        ws,
        "build",
        "//greet:upper",
        "--remote",
        f"127.0.0.1:{cluster.port}",
        "--digest-function",
        "blake3",
    )
    assert r.returncode == 1
    assert "--digest-function blake3: the server does not offer it; it offers sha256" in r.stderr
    assert "Traceback" not in r.stderr
    r = rbs(
        ws,
        "build",
        "//greet:upper",
        "--remote",
        f"127.0.0.1:{cluster.port}",
        "--remote-instance-name",
        "bar",
    )
    assert r.returncode == 1
    assert "unknown instance name 'bar'" in r.stderr and "Traceback" not in r.stderr
    r = rbs(ws, "build", "//greet:upper", "--digest-function", "sha256")
    assert r.returncode == 2 and "--digest-function needs --remote" in r.stderr
