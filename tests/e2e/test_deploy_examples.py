"""The deployment examples in executor/ and cas/ work with the real config loader and CLI."""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rbs.server.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CACHE_CONFIG = ROOT / "cas" / "rbs-cache.toml"
SERVER_UNIT = ROOT / "cas" / "rbs-server.service"
WORKER_UNIT = ROOT / "executor" / "rbs-worker.service"
WORKER_ENV = ROOT / "executor" / "rbs-worker.env"
RBS = [sys.executable, "-m", "rbs"]
# What a unit's ExecStart runs, by unit file.
SUBCOMMANDS = {SERVER_UNIT: ("remote", "serve"), WORKER_UNIT: ("remote", "worker")}
# The variables `rbs remote worker` reads, each with what the test puts in it.
WORKER_VARIABLES = ("RBS_REMOTE", "RBS_REMOTE_TOKEN")
TOKEN = "deploy-example-token"


def exec_start(unit: Path) -> list[str]:
    """The argv of the unit's one ExecStart= line (backslash continuations joined)."""
    text = re.sub(r"\\\n", " ", unit.read_text())
    lines = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    assert len(lines) == 1, f"{unit.name}: want exactly one ExecStart= line, got {len(lines)}"
    argv = shlex.split(lines[0].removeprefix("ExecStart="))
    # systemd's prefixes (-, @, +, !) would change what runs; the examples use none.
    assert argv and argv[0].startswith("/"), f"{unit.name}: ExecStart needs an absolute path"
    return argv


def replace_value(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    out[out.index(flag) + 1] = value
    return out


def cli_flags(*subcommand: str) -> set[str]:
    """The long options that `rbs <subcommand> --help` lists."""
    r = subprocess.run(
        [*RBS, *subcommand, "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    return set(re.findall(r"(?m)^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", r.stdout))


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (the examples use no quoting)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: {line!r} is not KEY=VALUE"
            out[key.strip()] = value.strip()
    return out


def read_line(proc: subprocess.Popen[str], want: str, timeout: float = 60) -> str:
    """The first stdout line containing `want`; fails if the process ends or is silent."""
    assert proc.stdout is not None
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if want in line:
            return line
        if not line:
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"no line with {want!r} from {proc.args!r}; stderr:\n{err[-3000:]}")


def stop(proc: subprocess.Popen[str]) -> int | None:
    """SIGTERM, as `systemctl stop` sends; the exit code, or None if it had ended already."""
    if proc.poll() is not None:
        proc.communicate()
        return None
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    return proc.returncode


def test_cache_config_loads_with_the_servers_loader() -> None:
    config = load_config(CACHE_CONFIG)
    # What cas/README.md says of the example: it serves other machines, needs a
    # token, is bounded, and accepts the default instance name.
    assert config.server.host == "0.0.0.0"
    assert config.server.token_file is not None
    assert config.cas.max_size is not None
    assert "" in config.server.instance_names
    assert config.server.data_dir.is_absolute()


@pytest.mark.parametrize("unit", [SERVER_UNIT, WORKER_UNIT], ids=lambda p: p.name)
def test_exec_start_flags_exist(unit: Path) -> None:
    argv = exec_start(unit)
    subcommand = SUBCOMMANDS[unit]
    assert tuple(argv[1:3]) == subcommand, f"{unit.name} runs {argv[1:3]}"
    known = cli_flags(*subcommand)
    used = {a.split("=", 1)[0] for a in argv[3:] if a.startswith("--")}
    unknown = sorted(used - known)
    assert not unknown, f"{unit.name}: `rbs {' '.join(subcommand)}` has no {', '.join(unknown)}"


@pytest.mark.parametrize("unit", [SERVER_UNIT, WORKER_UNIT], ids=lambda p: p.name)
def test_systemd_analyze_verify(unit: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit files were not verified")
    # verify insists that ExecStart's program exists; the unit names an install path.
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(exec_start(unit)[0], sys.executable, 1))
    r = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    about_unit = [ln for ln in (r.stdout + r.stderr).splitlines() if unit.name in ln]
    assert not about_unit, "\n".join(about_unit)
    if r.returncode != 0:
        pytest.skip(f"systemd-analyze cannot run here: {(r.stderr or r.stdout).strip()[:500]}")


@pytest.fixture
def cache_server(tmp_path: Path) -> Iterator[str]:
    """The server unit's command with the example config; host, port and paths made local."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    ready = tmp_path / "server.ready"
    argv = replace_value(exec_start(SERVER_UNIT), "--config", str(CACHE_CONFIG))
    overrides = ["--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "data")]
    overrides += ["--token-file", str(token_file), "--ready-file", str(ready)]
    proc = subprocess.Popen(
        [*RBS, *argv[1:], *overrides],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_line(proc, "serving on")
        yield f"127.0.0.1:{json.loads(ready.read_text())['port']}"
        assert stop(proc) == 0
    finally:
        stop(proc)


def test_worker_registers_with_the_unit_and_env_file(cache_server: str, tmp_path: Path) -> None:
    example = env_file(WORKER_ENV)
    unknown = sorted(set(example) - set(WORKER_VARIABLES))
    assert not unknown, f"{WORKER_ENV.name}: the worker reads no {', '.join(unknown)}"
    values = {"RBS_REMOTE": cache_server, "RBS_REMOTE_TOKEN": TOKEN}
    env = {k: v for k, v in os.environ.items() if k not in WORKER_VARIABLES}
    # Only the variables the example file sets reach the worker: without RBS_REMOTE it
    # would look for 127.0.0.1:8980, without the token the server would refuse it.
    env |= {k: values[k] for k in example}
    argv = replace_value(exec_start(WORKER_UNIT), "--work-dir", str(tmp_path / "worker"))
    proc = subprocess.Popen(
        [*RBS, *argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        line = read_line(proc, "registered with")
        assert cache_server in line
        # What `systemctl stop` does with KillMode=mixed: SIGTERM to the worker alone.
        assert stop(proc) == 0
    finally:
        stop(proc)
