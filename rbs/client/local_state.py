"""The embedded cluster's record (cluster.json) and whether its processes are ours, cheaply.

`rbs job submit` runs in shell loops, so finding a local cluster that is already up must
cost next to nothing: this module reads `cluster.json`, checks through /proc that both
recorded pids are this cluster's server and worker (command line and start time, as
rbs.client.local does before it signals anything), and gives the address. It imports
neither pathlib, dataclasses nor subprocess; starting or restarting a cluster is
rbs.client.local's work, which imports this module for the same checks.
"""

from __future__ import annotations

import os

from rbs.client import fastjson

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SERVE = "serve"
WORKER = "worker"


def rbs_home() -> str:
    """$RBS_HOME, else ~/.rbs."""
    return os.environ.get("RBS_HOME") or os.path.join(os.path.expanduser("~"), ".rbs")


def local_root(home: str | os.PathLike[str] | None = None) -> str:
    """The local cluster's folder: $RBS_HOME/local (or HOME/local)."""
    return os.path.join(os.fspath(home) if home is not None else rbs_home(), "local")


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, IndexError, ProcessLookupError, PermissionError):
        return None


def alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie (init here does not reap orphans)."""
    fields = proc_stat(pid)
    return fields is not None and len(fields) > 0 and fields[0] not in (b"Z", b"X")


def started(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat)."""
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def ours(pid: int, role: str, root: str, start_time: int | None) -> bool:
    """True if `pid` is the server or worker (`role`) of the cluster in `root`, not a reused pid."""
    if pid <= 0 or not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    folder = os.path.join(root, "server" if role == SERVE else "worker")
    mine = "rbs" in args and "remote" in args and role in args and folder in args
    return mine and (start_time is None or started(pid) == start_time)


def read_record(root: str) -> dict[str, Any] | None:
    """cluster.json's fields, checked for type, whether or not its processes run."""
    try:
        with open(os.path.join(root, "cluster.json"), "rb") as f:
            data = fastjson.loads(f.read())
        record = {
            "host": str(data["host"]),
            "grpc_port": int(data["grpc_port"]),
            "http_port": int(data["http_port"]),
            "server_pid": int(data["server_pid"]),
            "worker_pid": int(data["worker_pid"]),
            "server_started": _opt_int(data.get("server_started")),
            "worker_started": _opt_int(data.get("worker_started")),
        }
    except (FileNotFoundError, NotADirectoryError, ValueError, TypeError, KeyError):
        return None
    except AttributeError:  # a JSON document that is not an object
        return None
    return record


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def running_address(home: str | os.PathLike[str] | None = None) -> tuple[str, int] | None:
    """(host, gRPC port) of the local cluster if its server and worker both run, else None.

    None means "ask rbs.client.local": nothing recorded, or a process gone, which that
    module starts or restarts under its lock.
    """
    root = local_root(home)
    record = read_record(root)
    if record is None:
        return None
    if not ours(record["server_pid"], SERVE, root, record["server_started"]):
        return None
    if not ours(record["worker_pid"], WORKER, root, record["worker_started"]):
        return None
    return record["host"], record["grpc_port"]
