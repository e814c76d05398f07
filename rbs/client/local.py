"""The embedded default cluster: a server and one worker under $RBS_HOME, started on demand.

With no `--server` and no `RBS_REMOTE`, job commands use this cluster. The first use
starts `rbs remote serve` and `rbs remote worker` as background processes in their own
sessions, records their pids, start times and ports in `cluster.json`, and prints one
line. A file lock makes concurrent first uses (a parallel shell loop) start exactly one
cluster. `rbs remote down` stops both processes by pid.

A recorded pid counts as the cluster's only while /proc shows that very process: the
rbs command for this $RBS_HOME, started at the recorded time. After a reboot the pids
may belong to anything, and nothing that is not ours is ever signalled.

A server that died while its worker lives is restarted, under the same lock, on the
same data dir and the same port: the worker reconnects by itself and lists the leases
it holds, so its running jobs carry on as the same attempt. If something else took the
port meanwhile, the server starts on a new one and the worker is restarted against it
(its running jobs are then stopped and requeued, as on any worker restart).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rbs.client import local_state
from rbs.client.errors import JobError

START_TIMEOUT_S = 60.0


class StartError(JobError, RuntimeError):
    """The local server or worker could not start (a bad server.toml, ...): the message
    has its log's last lines. A JobError, so the CLI prints it as a refusal, not a bug."""


CONFIG_FILE = "server.toml"  # in $RBS_HOME: the local server's --config, when there
_SERVE = local_state.SERVE
_WORKER = local_state.WORKER


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalCluster:
    root: Path
    host: str
    grpc_port: int
    http_port: int
    server_pid: int
    worker_pid: int
    # /proc/<pid>/stat start times (clock ticks since boot); None in files written before
    # they were recorded, where the command line alone identifies the process.
    server_started: int | None = None
    worker_started: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.grpc_port}"


def rbs_home() -> Path:
    return Path(os.environ.get("RBS_HOME") or Path.home() / ".rbs")


def local_root(home: Path | None = None) -> Path:
    return (home or rbs_home()) / "local"


def _alive(pid: int) -> bool:
    return local_state.alive(pid)


def _started(pid: int) -> int | None:
    return local_state.started(pid)


def _ours(pid: int, role: str, root: Path, started: int | None) -> bool:
    """True if `pid` is this cluster's server or worker (`role`), not a reused pid."""
    return local_state.ours(pid, role, str(root), started)


def _read(root: Path) -> LocalCluster | None:
    """The cluster recorded in cluster.json, whether or not it runs."""
    record = local_state.read_record(str(root))
    return None if record is None else LocalCluster(root=root, **record)


def _server_ours(c: LocalCluster) -> bool:
    return _ours(c.server_pid, _SERVE, c.root, c.server_started)


def _worker_ours(c: LocalCluster) -> bool:
    return _ours(c.worker_pid, _WORKER, c.root, c.worker_started)


def _load(root: Path) -> LocalCluster | None:
    cluster = _read(root)
    if cluster is not None and _server_ours(cluster) and _worker_ours(cluster):
        return cluster
    return None


def _server_only(root: Path) -> LocalCluster | None:
    """The recorded cluster if its worker runs but its server does not."""
    cluster = _read(root)
    if cluster is not None and _worker_ours(cluster) and not _server_ours(cluster):
        return cluster
    return None


def running_local(home: Path | None = None, *, announce: bool = True) -> LocalCluster | None:
    """The local cluster under $RBS_HOME if it is running; never starts one, but restarts
    the server of a cluster whose worker still runs."""
    root = local_root(home)
    cluster = _load(root)
    if cluster is not None or _server_only(root) is None:
        return cluster
    with _locked(root):
        cluster = _load(root)
        if cluster is not None:
            return cluster
        broken = _server_only(root)
        if broken is None:
            return None
        cluster, note = _restart_server(broken)
    if announce:
        print(note, file=sys.stderr)
    return cluster


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
            raise StartError(f"the local {what} exited with code {proc.returncode}:\n{tail}")
        with contextlib.suppress(FileNotFoundError, ValueError):
            data: dict[str, int] = json.loads(ready.read_text())
            return data
        time.sleep(0.02)
    proc.kill()
    raise StartError(f"the local {what} did not become ready in {START_TIMEOUT_S:.0f} s; see {log}")


def _start_server(root: Path, port: int) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    ready = root / "server.ready"
    with contextlib.suppress(FileNotFoundError):
        ready.unlink()
    log = root / "server.log"
    args = ["remote", _SERVE, "--port", str(port), "--host", "127.0.0.1"]
    args += ["--data-dir", str(root / "server"), "--ready-file", str(ready)]
    if (config := root.parent / CONFIG_FILE).is_file():  # queues, preemption, limits
        args += ["--config", str(config)]
    server = _spawn(args, log)
    return server, _wait_for("server", ready, server, log)


def _start_worker(root: Path, port: int) -> subprocess.Popen[bytes]:
    ready = root / "worker.ready"
    with contextlib.suppress(FileNotFoundError):
        ready.unlink()
    log = root / "worker.log"
    args = ["remote", _WORKER, "--server", f"127.0.0.1:{port}"]
    args += ["--work-dir", str(root / "worker"), "--ready-file", str(ready)]
    worker = _spawn(args, log)
    _wait_for("worker", ready, worker, log)
    return worker


def _record(root: Path, ports: dict[str, int], server_pid: int, worker_pid: int) -> LocalCluster:
    cluster = LocalCluster(
        root=root,
        host="127.0.0.1",
        grpc_port=ports["port"],
        http_port=ports["http_port"],
        server_pid=server_pid,
        worker_pid=worker_pid,
        server_started=_started(server_pid),
        worker_started=_started(worker_pid),
    )
    state = {
        "host": cluster.host,
        "grpc_port": cluster.grpc_port,
        "http_port": cluster.http_port,
        "server_pid": cluster.server_pid,
        "worker_pid": cluster.worker_pid,
        "server_started": cluster.server_started,
        "worker_started": cluster.worker_started,
    }
    tmp = root / "cluster.json.tmp"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, root / "cluster.json")
    return cluster


def _ports_free(host: str, ports: tuple[int, ...]) -> bool:
    """True if nothing listens on these ports; SO_REUSEADDR, as the server binds, so the
    dead server's connections lingering in TIME_WAIT do not count."""
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def _restart_server(old: LocalCluster) -> tuple[LocalCluster, str]:
    """Start a dead server again on its data dir and port; the caller holds the lock."""
    root = old.root
    if _ports_free(old.host, (old.grpc_port, old.http_port)):
        try:
            server, ports = _start_server(root, old.grpc_port)
        except RuntimeError:
            pass  # taken between the check and the bind, most likely: a new port, below
        else:
            cluster = _record(root, ports, server.pid, old.worker_pid)
            note = (
                f"rbs: the local server (pid {old.server_pid}) had stopped; restarted it at "
                f"{cluster.address}; the worker and its jobs carry on"
            )
            return cluster, note
    server, ports = _start_server(root, 0)
    try:
        _stop(root, [(old.worker_pid, _WORKER, old.worker_started)])
        worker = _start_worker(root, ports["port"])
    except RuntimeError:
        server.terminate()
        raise
    cluster = _record(root, ports, server.pid, worker.pid)
    note = (
        f"rbs: the local server (pid {old.server_pid}) had stopped and port {old.grpc_port} "
        f"or {old.http_port} is now taken by another process: restarted it at "
        f"{cluster.address} and restarted the worker (its running jobs are requeued)"
    )
    return cluster, note


def ensure_local(home: Path | None = None, *, announce: bool = True) -> LocalCluster:
    """Return the running local cluster, starting it (or its dead server) first if needed."""
    root = local_root(home)
    cluster = _load(root)
    if cluster is not None:
        return cluster
    with _locked(root):
        cluster = _load(root)
        if cluster is not None:
            return cluster
        broken = _server_only(root)
        if broken is not None:
            cluster, note = _restart_server(broken)
        else:
            _stop_recorded(root)
            cluster = _start(root)
            config = root.parent / CONFIG_FILE
            read = f", its config from {config}" if config.is_file() else ""
            note = (
                f"rbs: started a local cluster at {cluster.address} with one worker under "
                f"{root}{read} (stop it with `rbs remote down`)"
            )
    if announce:
        print(note, file=sys.stderr)
    return cluster


def _start(root: Path) -> LocalCluster:
    with contextlib.suppress(FileNotFoundError):
        (root / "cluster.json").unlink()
    server, ports = _start_server(root, 0)
    try:
        worker = _start_worker(root, ports["port"])
    except RuntimeError:
        server.terminate()
        raise
    return _record(root, ports, server.pid, worker.pid)


def _stop(root: Path, procs: list[tuple[int, str, int | None]]) -> list[int]:
    """SIGTERM, then SIGKILL after 10 s, each process that is really ours; return those."""
    pids = [pid for pid, role, started in procs if _ours(pid, role, root, started)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid, role, started in procs:
        # Checked again: a pid that exited meanwhile may have been given to another process.
        if pid in pids and _ours(pid, role, root, started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return pids


def _stop_recorded(root: Path) -> list[int]:
    """Stop the processes recorded in cluster.json, only those still ours; return them."""
    cluster = _read(root)
    pids = []
    if cluster is not None:
        procs = [
            (cluster.worker_pid, _WORKER, cluster.worker_started),
            (cluster.server_pid, _SERVE, cluster.server_started),
        ]
        pids = _stop(root, procs)
    with contextlib.suppress(FileNotFoundError):
        (root / "cluster.json").unlink()
    return pids


def down(home: Path | None = None) -> list[int]:
    """Stop the local cluster; returns the pids that were signalled."""
    root = local_root(home)
    with _locked(root):
        return _stop_recorded(root)
