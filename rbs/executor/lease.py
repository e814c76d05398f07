"""The worker's job lease: renewed by what the daemon hears, enforced by a watchdog process.

The server answers each heartbeat with a renewal. The daemon writes the lease's end,
`monotonic() + lease_ttl` (CLOCK_MONOTONIC is one clock for every process of a host),
to `<work-dir>/lease`. A separate watchdog process (`python -m rbs.executor.lease`,
started by the daemon) reads it: once it has passed, every run whose process group
is recorded in `<work-dir>/jobs/<lease>/pgid` gets SIGTERM, then SIGKILL after the
grace the server named, and a `lapsed` mark the daemon finds when the run ends (it
then drops the run instead of reporting it: the server requeues it). The daemon
cannot be the enforcer: frozen (SIGSTOP), it would renew nothing and kill nothing.
Standard library only: the watchdog starts in a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

LEASE_FILE = "lease"
PGID_FILE = "pgid"
LAPSED_FILE = "lapsed"
CHECK_S = 0.1  # how often the watchdog looks at the lease


class WorkerLease:
    """The daemon's side: renew on what it hears, say whether a run's lease lapsed."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / LEASE_FILE
        self.ttl = 0.0
        self.grace = 0.0
        self._written = 0.0

    def configure(self, ttl: float, grace: float) -> None:
        """What the server's Registered says; ttl 0: no lease (runs outlive a silence)."""
        self.ttl, self.grace = ttl, grace
        self._written = 0.0
        if ttl <= 0:
            self.clear()
        else:
            self.renew()

    def renew(self) -> None:
        if self.ttl <= 0:
            return
        until = time.monotonic() + self.ttl
        # Rewritten only when it moves by a tenth of the ttl: an older end on disk only
        # makes the watchdog act sooner, never later.
        if until - self._written < self.ttl / 10:
            return
        tmp = self.path.with_name(LEASE_FILE + ".tmp")
        tmp.write_text(f"{until!r} {self.grace!r} {os.getpid()}\n")
        os.replace(tmp, self.path)
        self._written = until

    def clear(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    @staticmethod
    def record(run_dir: Path, pgid: int) -> None:
        """A run's process group, for the watchdog."""
        with contextlib.suppress(FileNotFoundError):
            (run_dir / PGID_FILE).write_text(str(pgid))

    @staticmethod
    def lapsed(run_dir: Path) -> bool:
        return (run_dir / LAPSED_FILE).exists()


def start_watchdog(work_dir: Path) -> subprocess.Popen[bytes]:
    """The watchdog of this daemon's runs; it ends by itself once the daemon is gone."""
    return subprocess.Popen(
        [sys.executable, "-m", "rbs.executor.lease", str(work_dir), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a ^C to the daemon's terminal is not meant for it
        close_fds=True,
    )


def _read_lease(path: Path) -> tuple[float, float, int] | None:
    try:
        until, grace, owner = path.read_text().split()
        return float(until), float(grace), int(owner)
    except (FileNotFoundError, ValueError):
        return None


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (a zombie does not: its parent, the
    frozen daemon, has not reaped it yet, but it holds nothing)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def enforce(jobs: Path, grace: float) -> list[int]:
    """Stop every recorded run not stopped yet: mark it, SIGTERM, SIGKILL after `grace`."""
    groups = []
    for pgid_file in sorted(jobs.glob(f"*/{PGID_FILE}")):
        mark = pgid_file.with_name(LAPSED_FILE)
        if mark.exists():
            continue
        try:
            pgid = int(pgid_file.read_text())
            mark.touch()
        except (FileNotFoundError, ValueError):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        groups.append(pgid)
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline and any(map(group_alive, groups)):
        time.sleep(0.02)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    return groups


def watch(work_dir: Path, parent: int) -> None:
    """Until the daemon is gone and its lease has nothing left to enforce."""
    lease_path = work_dir / LEASE_FILE
    while True:
        lease = _read_lease(lease_path)
        orphaned = os.getppid() != parent
        if orphaned and (lease is None or lease[2] != parent):
            return  # a new daemon owns the lease now, or none is held
        if lease is not None and time.monotonic() > lease[0]:
            enforce(work_dir / "jobs", lease[1])
            if orphaned:
                return
        time.sleep(CHECK_S)


if __name__ == "__main__":
    watch(Path(sys.argv[1]), int(sys.argv[2]))
