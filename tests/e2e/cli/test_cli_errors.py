"""The `rbs` command never shows a traceback: what a user sees when things go wrong.

An unreachable server is named with both ports it uses (gRPC, and the jobs API on the
gRPC port + 1) and what to check; a pipe closed early (`rbs job logs ID | head`) ends
quietly, by SIGPIPE as other tools do; an unexpected error is one line and a hint.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN", "RBS_REMOTE_TLS_CA", "RBS_DEBUG")
    }
    env["RBS_HOME"] = str(home)
    env.update(extra)
    return env


def rbs(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        env=_env(home, **env),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def closed_port_pair() -> int:
    """A port P such that neither P nor P + 1 accepts connections on 127.0.0.1 right now."""
    for _ in range(50):
        with contextlib.ExitStack() as stack:
            a = stack.enter_context(socket.socket())
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            b = stack.enter_context(socket.socket())
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            # Bound but not listening: a connect to either is refused.
            return int(port)
    raise AssertionError("no pair of free adjacent ports found")


@pytest.mark.parametrize(
    "args",
    [
        ("job", "submit", "--", "true"),
        ("job", "list"),
        ("job", "submit", "--cpus", "2", "--", "sh", "-c", "exit 0"),
    ],
    ids=" ".join,
)
def test_unreachable_server_names_both_ports_and_what_to_do(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    port = closed_port_pair()
    r = rbs(tmp_path, args[0], args[1], "--server", f"127.0.0.1:{port}", *args[2:])
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"127.0.0.1:{port}" in line  # the address given (the gRPC port)
    assert f"127.0.0.1:{port + 1}" in line  # the address tried (the jobs API)
    assert "gRPC port + 1" in line
    assert "rbs remote serve" in line and "--server" in line


def test_bad_server_address_is_one_line(tmp_path: Path) -> None:
    r = rbs(tmp_path, "job", "list", "--server", "no-port-here")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "--server 'no-port-here': want HOST:PORT" in r.stderr


def test_unreadable_tls_ca_names_the_flag(tmp_path: Path) -> None:
    r = rbs(tmp_path, "job", "list", "--server", "127.0.0.1:1", "--tls-ca", "missing.pem")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "--tls-ca 'missing.pem'" in r.stderr


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """RBS_HOME of an embedded local cluster, with one job that wrote many lines."""
    home = tmp_path_factory.mktemp("rbs-home")
    try:
        r = rbs(home, "job", "submit", "--wait", "--", "seq", "1", "30000")
        assert r.returncode == 0, r.stderr
        yield home
    finally:
        r = rbs(home, "remote", "down")
        assert r.returncode == 0, r.stderr


def test_logs_into_a_pipe_closed_early_ends_quietly(home: Path) -> None:
    # 30,000 lines are ~170 KB, far more than a pipe holds, so `rbs job logs` is still
    # writing when `head` exits: what a user sees is head's line and nothing else.
    script = f'{sys.executable} -m rbs job logs 1 | head -n 1; echo "status=${{PIPESTATUS[0]}}"'
    r = subprocess.run(
        ["bash", "-c", script],
        env=_env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.stderr == ""
    first, status = r.stdout.splitlines()
    assert first.startswith("[rbs] job 1 ")  # head's one line: the job's first log line
    assert status == "status=141"  # 128 + SIGPIPE, as `seq 1 100000 | head -n 1`


def test_unknown_job_is_one_line(home: Path) -> None:
    r = rbs(home, "job", "show", "999999")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--max-retries", "100000000000000000000"], "--max-retries"),
        (["--time", "99999999999999999d"], "--time '99999999999999999d'"),
        (["--priority", "100000000000000000000000"], "from -1000000 to 1000000"),
        (["--env", "A=\x01"], "U+0001"),
        (["--name", "a\x1b[2Jb"], "--name"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else "",
)
def test_out_of_range_flags_are_one_line_naming_flag_value_and_range(
    home: Path, flags: list[str], names: str
) -> None:
    r = rbs(home, "job", "submit", *flags, "--", "true")
    assert r.returncode == 2, r.stdout
    assert "Traceback" not in r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith("rbs job submit: error: ")
    assert names in line
