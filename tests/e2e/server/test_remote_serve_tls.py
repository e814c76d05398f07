"""`rbs remote serve --tls-cert/--tls-key` and the clients' `--tls-ca`, as a user runs them."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_certs import self_signed

RBS = [sys.executable, "-m", "rbs"]


def _env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN", "RBS_REMOTE_TLS_CA")
    }
    env["RBS_HOME"] = str(home)
    return env


def rbs(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RBS, *args],
        env={**_env(home), **extra},
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A TLS server on a free port: its address and the certificate to trust."""
    cert, key = self_signed(tmp_path)
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen(
        [
            *RBS,
            *("remote", "serve", "--log-level", "warning", "--port", "0"),
            *("--data-dir", str(tmp_path / "data"), "--ready-file", str(ready)),
            *("--tls-cert", str(cert), "--tls-key", str(key)),
        ],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if readable else ""
        assert "TLS on both ports" in line, line
        port = json.loads(ready.read_text())["port"]
        yield f"127.0.0.1:{port}", cert
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_job_commands_trust_the_server_with_tls_ca(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    address, cert = served
    r = rbs(tmp_path, "job", "submit", "--server", address, "--tls-ca", str(cert), "--", "true")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit()
    # The same through the environment, on the click path.
    r = rbs(tmp_path, "job", "show", "--server", address, job, RBS_REMOTE_TLS_CA=str(cert))
    assert r.returncode == 0, r.stderr
    # Plaintext to a TLS server: one line, naming the jobs port, no traceback.
    r = rbs(tmp_path, "job", "show", "--server", address, job)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert f":{int(address.rsplit(':', 1)[1]) + 1}" in r.stderr


def test_remote_status_over_tls(served: tuple[str, Path], tmp_path: Path) -> None:
    address, cert = served
    r = rbs(tmp_path, "remote", "status", "--server", address, "--tls-ca", str(cert), "--json")
    assert r.returncode == 0, r.stderr
    assert "workers" in json.loads(r.stdout)


@pytest.mark.parametrize(
    ("which", "needle"),
    [("cert", "--tls-cert needs --tls-key"), ("key", "--tls-key needs --tls-cert")],
)
def test_half_a_tls_pair_is_a_clear_error(tmp_path: Path, which: str, needle: str) -> None:
    cert, key = self_signed(tmp_path)
    flag = ["--tls-cert", str(cert)] if which == "cert" else ["--tls-key", str(key)]
    r = rbs(tmp_path, "remote", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), *flag)
    assert r.returncode == 1
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_a_worker_registers_over_tls_with_tls_ca(served: tuple[str, Path], tmp_path: Path) -> None:
    address, cert = served
    proc = subprocess.Popen(
        [
            *RBS,
            *("remote", "worker", "--server", address, "--tls-ca", str(cert)),
            *("--work-dir", str(tmp_path / "w"), "--cpus", "1", "--log-level", "warning"),
        ],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if readable else ""
        assert f"registered with {address}" in line, line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_a_worker_with_an_unreadable_ca_says_so_in_one_line(
    served: tuple[str, Path], tmp_path: Path
) -> None:
    address, _ = served
    r = rbs(tmp_path, "remote", "worker", "--server", address, "--tls-ca", "nope.pem")
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert "--tls-ca 'nope.pem'" in r.stderr


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "WORKSPACE"


BANNER = "== greetings ==\nHELLO\nBONJOUR\nHOLA\n"


@pytest.mark.timeout(240)
def test_rbs_build_uses_the_cache_over_tls(served: tuple[str, Path], tmp_path: Path) -> None:
    import shutil

    address, cert = served

    def build(name: str, *tls: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
        ws = tmp_path / name
        shutil.copytree(EXAMPLE, ws, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
        r = subprocess.run(
            [*RBS, "build", "//...", "--remote-cache-only", "--remote", address, *tls],
            cwd=ws,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=200,
            check=False,
        )
        return ws, r

    ws, r = build("one", "--tls-ca", str(cert))
    assert r.returncode == 0, r.stderr
    assert (ws / "rbs-out/bin/greet/banner.txt").read_text() == BANNER
    # Plaintext to the TLS server: refused, in words, without a traceback.
    _, r = build("two")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert address in r.stderr and "UNAVAILABLE" in r.stderr
