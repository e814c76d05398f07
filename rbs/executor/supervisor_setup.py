"""What a fresh run supervisor does before its loop: sweep what a dead one left, listen.

Standard library only (plus rbs's own stdlib-only modules), as the supervisor.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

from rbs.executor.cgroup_base import CgroupBackend, CgroupError
from rbs.executor.supervisor_proto import socket_address
from rbs.executor.supervisor_run import PGID_FILE

log = logging.getLogger("rbs.executor.supervisor")


def sweep(backend: CgroupBackend, work_dir: Path) -> None:
    """Kill what a previous supervisor's runs left: nothing of them can be re-attached
    (the worker's cgroup scope, and the process groups named in `jobs/*/pgid`)."""
    try:
        swept = backend.sweep()
        if swept:
            log.info("killed and removed %d job cgroup(s) left by a previous run", len(swept))
    except CgroupError as e:
        log.warning("could not sweep job cgroups left by a previous run: %s", e)
    for pgid_file in (work_dir / "jobs").glob(f"*/{PGID_FILE}"):
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(pgid_file.read_text()), signal.SIGKILL)


def listen(work_dir: Path) -> socket.socket:
    """The supervisor's socket, for its daemon alone (mode 0600), non-blocking."""
    path, dir_fd = socket_address(work_dir)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)  # the daemon's alone: a run must not ask for runs
    finally:
        if dir_fd is not None:
            os.close(dir_fd)
    sock.listen(4)
    sock.setblocking(False)
    return sock
