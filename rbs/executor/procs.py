"""Find and wait for the live members of a process group by reading /proc.

Zombies count as gone: on these hosts init does not reap orphans, so a killed
background process of a job may linger as a zombie that holds no resources.
"""

from __future__ import annotations

import os
import time


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group `pgid`."""
    try:
        os.killpg(pgid, 0)  # one syscall answers the common case: no member at all
    except ProcessLookupError:
        return []
    except PermissionError:
        pass
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited while we looked
            continue
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return members


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def wait_group_gone(pgid: int, timeout_s: float = 2.0) -> list[int]:
    """Wait until group `pgid` has no live members; returns those still alive at timeout."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        left = group_members(pgid)
        if not left or time.monotonic() >= deadline:
            return left
        # Nothing to block on for another process's exit; SIGKILLed ones go in microseconds.
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
