"""BuildGrid from PyPI in a venv of its own (cached across runs), and a CAS + action cache
server of it on loopback: the second REAPI implementation the interop tests talk to."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

VERSION = os.environ.get("RBS_TEST_BUILDGRID_VERSION", "0.4.4")
_INSTALL_TIMEOUT_S = 900


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rbs-tests"


def bgd() -> Path:
    """The `bgd` command of a venv holding buildgrid==VERSION; installs it once (under a
    file lock, so parallel tests share one install) or skips the test saying why."""
    venv = cache_dir() / f"buildgrid-{VERSION}"
    exe = venv / "bin" / "bgd"
    if exe.exists():
        return exe
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"buildgrid-{VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if exe.exists():
            return exe
        log = venv.parent / f"buildgrid-{VERSION}.install.log"
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", "--clear", str(venv)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            r = subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q", f"buildgrid=={VERSION}"],
                capture_output=True,
                text=True,
                timeout=_INSTALL_TIMEOUT_S,
            )
        except (subprocess.SubprocessError, OSError) as e:
            pytest.skip(f"cannot make a venv for BuildGrid {VERSION}: {e}")
        log.write_text(r.stdout + r.stderr)
        if r.returncode != 0 or not exe.exists():
            tail = " | ".join((r.stdout + r.stderr).strip().splitlines()[-3:])
            with contextlib.suppress(OSError):
                subprocess.run(["rm", "-rf", str(venv)], check=False, timeout=60)
            pytest.skip(f"pip cannot install buildgrid=={VERSION} (see {log}): {tail}")
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CONFIG = """\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
storages:
  - !disk-storage &cas
    path: {cas}
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 10000
    allow-updates: true
instances:
  - name: ''
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


def _answers(port: int) -> bool:
    from rbs.wire.remote_caps import read_offer

    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        try:
            grpc.channel_ready_future(ch).result(timeout=1)
            read_offer(ch)
        except Exception:
            return False
    return True


@contextlib.contextmanager
def cache_server(root: Path) -> Iterator[int]:
    """`bgd server start` with a CAS + action cache config on a free loopback port; yields
    the port once GetCapabilities answers, stops the server (by its pid) afterwards."""
    exe = bgd()
    root.mkdir(parents=True, exist_ok=True)
    for _ in range(3):  # the port may be taken between picking and binding it
        port = free_port()
        config = root / "bgd.yml"
        config.write_text(CONFIG.format(port=port, cas=root / "cas"))
        log = open(root / "bgd.log", "w")  # noqa: SIM115 (closed below)
        proc = subprocess.Popen(
            [str(exe), "server", "start", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline and not _answers(port):
            time.sleep(0.1)
        if proc.poll() is None and _answers(port):
            break
        proc.kill()
        proc.wait(timeout=30)
        log.close()
    else:
        pytest.fail(f"BuildGrid did not start: {(root / 'bgd.log').read_text()[-2000:]}")
    try:
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
