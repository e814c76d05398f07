"""The worker's job lease: renewed by what the daemon hears, enforced by the run supervisor.

The server answers each heartbeat with a renewal. The daemon turns it into the lease's
end, `monotonic() + lease_ttl` (CLOCK_MONOTONIC is one clock for every process of a
host), and hands it to the run supervisor (`rbs.executor.supervisor`, a process of its
own), which stops every run once that end has passed: SIGTERM, SIGKILL after the grace
the server named, and an `Exited(lapsed=True)` the daemon drops instead of reporting
(the server requeues the run). The daemon cannot be the enforcer: frozen (SIGSTOP), it
would renew nothing and kill nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

Renewal = Callable[[float, float], None]  # (until, grace)


class WorkerLease:
    """The daemon's side: renew on what it hears; the supervisor learns each new end."""

    def __init__(self, on_renew: Renewal | None = None) -> None:
        self.on_renew = on_renew
        self.ttl = 0.0
        self.grace = 0.0
        self._sent = 0.0

    def configure(self, ttl: float, grace: float) -> None:
        """What the server's Registered says; ttl 0: no lease (runs outlive a silence)."""
        self.ttl, self.grace = ttl, grace
        self._sent = 0.0
        if ttl <= 0:
            self.clear()
        else:
            self.renew()

    def renew(self) -> None:
        if self.ttl <= 0:
            return
        until = time.monotonic() + self.ttl
        # Passed on only when it moves by a tenth of the ttl: an older end only makes
        # the supervisor act sooner, never later.
        if until - self._sent < self.ttl / 10:
            return
        self._sent = until
        if self.on_renew is not None:
            self.on_renew(until, self.grace)

    def clear(self) -> None:
        if self.on_renew is not None:
            self.on_renew(0.0, self.grace)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (a zombie does not: its parent, a
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
