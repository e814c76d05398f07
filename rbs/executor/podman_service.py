"""The worker's own podman API service: a private socket, its own containers.conf.

Debian's podman fails here with its defaults (crun, the rlimits it asks for, hybrid
cgroups: ../shared/notes/foundations.md). So the worker starts `podman system service`
with a containers.conf of its own (`runtime = "runc"`, default ulimits nofile/nproc, no
network namespace setup) on a socket in `<work-dir>/containers/`, a 0700 folder: the
socket is root-equivalent, so no job may reach it (jobs get neither its path nor a
mount of it). The service runs in its own session and outlives a daemon restart (a
container's output comes through it); a new daemon reuses the one that answers. The
daemon's plain stop ends it (`stop`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

CONF = """\
# Written by rbs remote worker for its own podman API service.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
netns = "host"

[engine]
runtime = "runc"
"""
START_TIMEOUT_S = 60.0  # a loaded host takes seconds to bring podman up


class EngineError(Exception):
    """The container engine cannot be started or reached; the message says why."""


def folder(work_dir: Path) -> Path:
    return work_dir / "containers"


def socket_path(work_dir: Path) -> Path:
    return folder(work_dir) / "podman.sock"


def installed() -> bool:
    """Whether podman and runc are on this host's PATH."""
    return shutil.which("podman") is not None and shutil.which("runc") is not None


def answers(path: Path) -> bool:
    """Whether a Docker-compatible API answers `_ping` on the unix socket."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5.0)
            s.connect(str(path))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
            head = s.recv(64)
    except OSError:
        return False
    return head.startswith(b"HTTP/1.") and head[8:13] == b" 200 "


def conf_file(work_dir: Path) -> Path:
    """The worker's own containers.conf (written, with its 0700 folder, when missing)."""
    d = folder(work_dir)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    conf = d / "containers.conf"
    conf.write_text(CONF)
    return conf


def list_images(work_dir: Path) -> list[dict[str, Any]]:
    """`podman images --format json` under the worker's containers.conf: the host's
    images, without starting the API service (EngineError when podman fails)."""
    podman = shutil.which("podman")
    if podman is None:
        raise EngineError("podman is not installed on this worker (apt-get install podman runc)")
    env = {**os.environ, "CONTAINERS_CONF": str(conf_file(work_dir))}
    try:
        out = subprocess.run(
            [podman, "images", "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=True,
        ).stdout
        images: list[dict[str, Any]] = json.loads(out or "[]")
    except (subprocess.SubprocessError, ValueError) as e:
        raise EngineError(f"podman images failed: {e}") from None
    return images


def ensure(work_dir: Path) -> str:
    """The service's URL (`unix://...`), starting it when none answers; EngineError."""
    path = socket_path(work_dir)
    if answers(path):
        return f"unix://{path}"
    podman = shutil.which("podman")
    if podman is None:
        raise EngineError("podman is not installed on this worker (apt-get install podman runc)")
    if shutil.which("runc") is None:
        raise EngineError("runc is not installed on this worker (apt-get install runc)")
    d = folder(work_dir)
    conf = conf_file(work_dir)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    with open(d / "service.log", "ab") as log:
        proc = subprocess.Popen(
            [podman, "system", "service", "--time=0", f"unix://{path}"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    (d / "service.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    delay = 0.05
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (d / "service.log").read_text(errors="replace")[-400:].strip()
            raise EngineError(f"podman system service exited with code {proc.returncode}: {tail}")
        if path.exists() and answers(path):
            return f"unix://{path}"
        time.sleep(delay)  # polling a socket that does not exist yet: nothing to wait on
        delay = min(delay * 2, 0.5)
    proc.kill()
    proc.wait(10)
    raise EngineError(f"podman system service did not answer on {path} in {START_TIMEOUT_S:g}s")


def stop(work_dir: Path) -> None:
    """End the service this worker started (named in its pid file), if it runs."""
    pid_file = folder(work_dir) / "service.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)
    for _ in range(100):  # our child when this daemon started it: reap it, 10 s at most
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        except ChildProcessError:
            break
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        pid_file.unlink()
