"""`rbs remote serve` as a subprocess: ready file, graceful SIGTERM, clear start-up errors."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rbs.model import Digest
from rbs.wire.reapi_client import RemoteStore, connect

RBS = [sys.executable, "-m", "rbs"]


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RBS, "remote", "serve", "--log-level", "warning", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ready_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    return proc.stdout.readline() if ready else ""


def test_ready_file_and_graceful_stop(tmp_path: Path) -> None:
    ready_file = tmp_path / "ready.json"
    data_dir = tmp_path / "data"
    proc = _serve("--port", "0", "--data-dir", str(data_dir), "--ready-file", str(ready_file))
    try:
        line = _ready_line(proc)
        assert "serving on 127.0.0.1:" in line and str(data_dir) in line
        info = json.loads(ready_file.read_text())
        assert info["pid"] == proc.pid and f":{info['port']} " in line
        with connect(f"grpc://127.0.0.1:{info['port']}") as ch:
            d = RemoteStore(ch).put(b"persisted")
        # The same port is taken now: a second server says so and exits.
        clash = subprocess.run(
            [
                *RBS,
                "remote",
                "serve",
                "--port",
                str(info["port"]),
                "--data-dir",
                str(tmp_path / "d2"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert clash.returncode != 0
        assert "cannot listen on" in clash.stderr and "--port" in clash.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    assert rc == 0
    assert not ready_file.exists()
    assert (data_dir / "cas").is_dir() and (data_dir / "action_cache.db").is_file()
    assert d == Digest.of(b"persisted")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "70000"], "out of range"),
        (["--token-file", "/nonexistent/token"], "does not exist"),
        (["--max-cas-size", "lots"], "--max-cas-size"),
        (["--instance-name", "a/blobs/b"], "invalid instance name"),
        (["--config", "/nonexistent.toml"], "does not exist"),
    ],
)
def test_bad_options_fail_clearly(tmp_path: Path, args: list[str], needle: str) -> None:
    r = subprocess.run(
        [*RBS, "remote", "serve", "--data-dir", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
