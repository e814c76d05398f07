"""cgroup v2 (unified): one group per job with memory.max, cpu.max, pids.max, cgroup.kill.

Also used without controllers on hybrid hosts, where the v2 group only tracks the
job's processes and kills them all at once; the limits then come from v1.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from pathlib import Path

from rbs.executor import cgroup_pin
from rbs.executor.cgroup_base import (
    CgroupBackend,
    CgroupError,
    CgroupFs,
    JobCgroup,
    Limits,
    Step,
    Usage,
    check_scope,
    group_name,
    kill_pids,
    make_group,
    parse_keyed,
    read_int,
    remove_groups,
    unlimited_notes,
)

log = logging.getLogger(__name__)

CPU_PERIOD_US = 100_000
WANTED = ("cpu", "memory", "pids", "cpuset", "io")
# The leaf a worker moves itself into so that its own group may delegate controllers
# ("no internal processes": a group with controllers enabled for its children holds no
# processes itself).
WORKER_LEAF = "rbs-worker"
BASE = "rbs"


class V2Cgroup(JobCgroup):
    """One v2 group; `controllers` are those enabled for it by its parent."""

    def __init__(
        self,
        fs: CgroupFs,
        path: Path,
        controllers: frozenset[str],
        notes: tuple[str, ...] = (),
        home: Path | None = None,
    ) -> None:
        self._fs = fs
        self.path = path
        self.controllers = controllers
        self.notes = notes
        self.home = home  # the spawning process's own group
        enabled = ",".join(sorted(controllers)) or "no controllers"
        self.description = f"v2 {path} ({enabled})"
        self._base_usec = 0  # cpu of earlier jobs in this group (reused: `recycle`)
        self._last_usec: int | None = None  # as the last `usage` read it
        # Files each job's end reads (made once: a kept group's jobs all read them).
        self._events, self._stat = path / "cgroup.events", path / "cpu.stat"

    @property
    def fs(self) -> CgroupFs:
        return self._fs

    def procs_files(self) -> tuple[Path, ...]:
        return (self.path / "cgroup.procs",)

    def entry(self) -> tuple[Step, ...] | None:
        """A v2 domain group holds whole processes: the spawning process moves in, all of
        it, while it spawns. Only into a group without controllers, where nothing limits
        or charges it meanwhile (with memory or cpu limits the job joins by pid)."""
        if self.home is None or self.controllers:
            return None
        return (Step(self.path / "cgroup.procs", self.home / "cgroup.procs", process=True),)

    def pids(self) -> set[int]:
        return self._fs.pids(self.path)

    def signal(self, sig: int) -> int:
        kill_file = self.path / "cgroup.kill"
        if sig == signal.SIGKILL and self._fs.exists(kill_file):
            # cgroup.kill (5.14+) kills the whole tree atomically, even a fork bomb.
            count = len(self.pids())
            self._fs.write(kill_file, "1")
            return count
        return kill_pids(self._fs, [self.path], sig)

    def populated(self) -> bool:
        events = self._fs.read_if_there(self._events)
        if events is None:
            return bool(self.pids())
        return parse_keyed(events).get("populated", 0) == 1

    def usage(self) -> Usage:
        peak = (
            read_int(self._fs, self.path / "memory.peak") if "memory" in self.controllers else None
        )
        oom = 0
        if "memory" in self.controllers:
            events = self._fs.read_if_there(self.path / "memory.events")
            oom = parse_keyed(events).get("oom_kill", 0)
        usec = self._last_usec = self._usec()
        cpu = None if usec is None else (usec - self._base_usec) / 1e6
        return Usage(peak_memory_bytes=peak, oom_kills=oom, cpu_time_s=cpu)

    def _usec(self) -> int | None:
        stat = self._fs.read_if_there(self._stat)
        return None if stat is None else parse_keyed(stat).get("usage_usec")

    def recycle(self) -> bool:
        """Without the memory controller only cpu time counts, from now on. With it, no:
        memory.peak cannot be reset for every reader. Nor while a process lives in a
        group below it (cgroup.procs lists only the group's own)."""
        if "memory" in self.controllers:
            return False
        try:
            if self.populated():
                return False
            # Empty since `usage` read it (when it did): no process has run since.
            last, self._last_usec = self._last_usec, None
            self._base_usec = (last if last is not None else self._usec()) or 0
        except CgroupError:
            return False
        return True

    def remove(self) -> None:
        remove_groups(self._fs, [self.path])


class V2Backend(CgroupBackend):
    """Creates job groups under `base`, whose children get `controllers`."""

    name = "v2"

    def __init__(
        self,
        base: Path,
        controllers: frozenset[str],
        fs: CgroupFs | None = None,
        home: Path | None = None,
    ) -> None:
        self.base = base
        self.controllers = controllers
        self.fs = fs or CgroupFs()
        self.home = home  # the process's own group (`V2Cgroup.entry`); None: join by pid

    def describe(self) -> str:
        enabled = ",".join(sorted(self.controllers)) or "no controllers"
        return f"cgroup v2 under {self.base} ({enabled})"

    def sweep(self) -> list[Path]:
        groups = self.fs.children(self.base)
        remove_groups(self.fs, groups)
        return groups

    def create(self, key: str, limits: Limits) -> V2Cgroup:
        path = self.base / group_name(key)
        make_group(self.fs, path, parents=1)
        try:
            configure_v2(self.fs, path, limits, self.controllers)
        except CgroupError:
            with contextlib.suppress(CgroupError):
                remove_groups(self.fs, [path])
            raise
        notes = unlimited_notes(limits, set(self.controllers))
        return V2Cgroup(self.fs, path, self.controllers, notes, self.home)


def configure_v2(fs: CgroupFs, path: Path, limits: Limits, controllers: frozenset[str]) -> None:
    """Write the limits a v2 group's controllers can enforce."""
    if limits.memory_bytes is not None and "memory" in controllers:
        fs.write(path / "memory.max", str(limits.memory_bytes))
        # Without this a job under its limit would swap instead of being OOM-killed.
        swap = path / "memory.swap.max"
        if fs.exists(swap):
            fs.write(swap, "0")
    if limits.cpus is not None and "cpu" in controllers:
        fs.write(path / "cpu.max", f"{limits.cpu_quota_us(CPU_PERIOD_US)} {CPU_PERIOD_US}")
    if limits.pids_max is not None and "pids" in controllers:
        fs.write(path / "pids.max", str(limits.pids_max))
    cgroup_pin.write_v2(fs, path, limits, controllers)


def _enable(fs: CgroupFs, group: Path, want: set[str]) -> None:
    current = set(fs.read(group / "cgroup.subtree_control").split())
    missing = sorted(want - current)
    if missing:
        fs.write(group / "cgroup.subtree_control", " ".join("+" + c for c in missing))


def prepare_v2(
    fs: CgroupFs,
    own: Path,
    *,
    scope: str = "default",
    move_self: bool = True,
    home: Path | None = None,
) -> V2Backend:
    """Set up rbs's base group `own/rbs/<scope>` below the worker's own group `own` and
    enable the controllers for job groups under it.

    When `own` still holds the worker (and the kernel refuses to delegate controllers
    for that reason, EBUSY), the worker moves itself into the leaf `own/rbs-worker`
    first, as systemd's Delegate=yes expects of a service that manages sub-groups.
    `home` is the group the calling process is in (then the leaf, if it moved there).
    """
    base = own / BASE / check_scope(scope)
    available = set(fs.read(own / "cgroup.controllers").split())
    want = available & set(WANTED)
    if want:
        try:
            _enable(fs, own, want)
        except CgroupError as e:
            if e.errno != errno.EBUSY or not move_self:
                raise
            leaf = own / WORKER_LEAF
            if not fs.exists(leaf):
                fs.mkdir(leaf)
            fs.write(leaf / "cgroup.procs", str(os.getpid()))
            home = leaf
            log.info("moved the worker into %s so %s can delegate controllers", leaf, own)
            _enable(fs, own, want)
    for group in (base.parent, base):
        if not fs.exists(group):
            try:
                fs.mkdir(group)
            except FileExistsError:
                pass
            except OSError as e:
                raise CgroupError(
                    f"cannot create cgroup {group}: {e.strerror or e}", e.errno
                ) from e
        if want:
            _enable(fs, group, want)
    enabled = set(fs.read(base / "cgroup.subtree_control").split()) if want else set()
    return V2Backend(base, frozenset(enabled & want), fs, home)
