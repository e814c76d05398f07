"""The embedded default cluster: a server and one worker under $RBS_HOME, started on demand.

With no `--server` and no `RBS_REMOTE`, job commands use this cluster. The first use
starts `rbs remote serve` and `rbs remote worker` as background processes in their own
sessions, records their pids and ports in `cluster.json`, and prints one line. A file
lock makes concurrent first uses (a parallel shell loop) start exactly one cluster.
`rbs remote down` stops both processes by pid.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalCluster:
    root: Path
    host: str
    grpc_port: int
    http_port: int
    server_pid: int
    worker_pid: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.grpc_port}"


def rbs_home() -> Path:
    return Path(os.environ.get("RBS_HOME") or Path.home() / ".rbs")


def local_root(home: Path | None = None) -> Path:
    return (home or rbs_home()) / "local"


def _alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie (init here does not reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False
    return state not in (b"Z", b"X")


def _load(root: Path) -> LocalCluster | None:
    try:
        data = json.loads((root / "cluster.json").read_text())
        cluster = LocalCluster(root=root, **data)
    except (FileNotFoundError, ValueError, TypeError):
        return None
    if _alive(cluster.server_pid) and _alive(cluster.worker_pid):
        return cluster
    return None


def running_local(home: Path | None = None) -> LocalCluster | None:
    """The local cluster under $RBS_HOME if it is running; never starts one."""
    return _load(local_root(home))


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rbs", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )


def _wait_for(what: str, ready: Path, proc: subprocess.Popen[bytes], log: Path) -> dict[str, int]:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the local {what} exited with code {proc.returncode}:\n{tail}")
        with contextlib.suppress(FileNotFoundError, ValueError):
            data: dict[str, int] = json.loads(ready.read_text())
            return data
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(
        f"the local {what} did not become ready in {START_TIMEOUT_S:.0f} s; see {log}"
    )


def ensure_local(home: Path | None = None, *, announce: bool = True) -> LocalCluster:
    """Return the running local cluster, starting it first if needed."""
    root = local_root(home)
    cluster = _load(root)
    if cluster is not None:
        return cluster
    with _locked(root):
        cluster = _load(root)
        if cluster is not None:
            return cluster
        _stop_recorded(root)
        for name in ("server.ready", "worker.ready"):
            with contextlib.suppress(FileNotFoundError):
                (root / name).unlink()
        server_log = root / "server.log"
        server = _spawn(
            [
                "remote",
                "serve",
                "--port",
                "0",
                "--host",
                "127.0.0.1",
                "--data-dir",
                str(root / "server"),
                "--ready-file",
                str(root / "server.ready"),
            ],
            server_log,
        )
        ports = _wait_for("server", root / "server.ready", server, server_log)
        worker_log = root / "worker.log"
        worker = _spawn(
            [
                "remote",
                "worker",
                "--server",
                f"127.0.0.1:{ports['port']}",
                "--work-dir",
                str(root / "worker"),
                "--ready-file",
                str(root / "worker.ready"),
            ],
            worker_log,
        )
        try:
            _wait_for("worker", root / "worker.ready", worker, worker_log)
        except RuntimeError:
            server.terminate()
            raise
        cluster = LocalCluster(
            root=root,
            host="127.0.0.1",
            grpc_port=ports["port"],
            http_port=ports["http_port"],
            server_pid=server.pid,
            worker_pid=worker.pid,
        )
        state = {
            "host": cluster.host,
            "grpc_port": cluster.grpc_port,
            "http_port": cluster.http_port,
            "server_pid": cluster.server_pid,
            "worker_pid": cluster.worker_pid,
        }
        tmp = root / "cluster.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, root / "cluster.json")
    if announce:
        print(
            f"rbs: started a local cluster at {cluster.address} with one worker under {root} "
            "(stop it with `rbs remote down`)",
            file=sys.stderr,
        )
    return cluster


def _stop_recorded(root: Path) -> list[int]:
    """Stop the processes recorded in cluster.json (only those pids); return them."""
    try:
        data = json.loads((root / "cluster.json").read_text())
    except (FileNotFoundError, ValueError):
        return []
    pids = [int(data[k]) for k in ("worker_pid", "server_pid") if k in data]
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        (root / "cluster.json").unlink()
    return pids


def down(home: Path | None = None) -> list[int]:
    """Stop the local cluster; returns the pids that were signalled."""
    root = local_root(home)
    with _locked(root):
        return _stop_recorded(root)
