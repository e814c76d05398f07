"""cgroup v1: one group per job in each controller's hierarchy (memory, cpu, cpuacct, pids;
cpuset and blkio only for a job that pins cores or caps its I/O: rbs.executor.cgroup_pin).

Each hierarchy's group sits under the worker's own group in that hierarchy (for memory
on these hosts that is e.g. /process_api/<id>), so a job's limits nest inside the
worker's. Memory is limited with memsw as well, so that hitting the limit is a real
OOM kill rather than swapping, and OOM kills are read from memory.oom_control.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
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
KERNEL_PERIOD_US = 100_000  # cpu.cfs_period_us of a new group
CONTROLLERS = ("memory", "cpu", "cpuacct", "pids", "cpuset", "blkio")
# A group still charged with more memory than this once its job ended is not reused.
RECYCLE_MAX_CHARGE = 1 << 20


class V1Cgroup(JobCgroup):
    """One job's groups, keyed by controller (co-mounted controllers share a path)."""

    def __init__(
        self,
        fs: CgroupFs,
        groups: Mapping[str, Path],
        notes: tuple[str, ...],
        homes: Mapping[str, Path] | None = None,
    ) -> None:
        self._fs = fs
        self.groups = dict(groups)
        self.notes = notes
        self.homes = homes  # the spawning process's own group per hierarchy
        self._entry: tuple[Step, ...] | None = None  # `entry`, once worked out ((): none)
        self.description = "v1 " + " ".join(f"{c}:{p}" for c, p in sorted(self.groups.items()))
        # Counters of earlier jobs in this group (reused: `recycle`), and the last read.
        self._base = (0, 0)  # cpuacct.usage ns, oom_kill
        self._last: tuple[int, int] | None = None
        mem, acct = self.groups.get("memory"), self.groups.get("cpuacct")
        # The files read and written at each job's end (made once: a kept group's
        # jobs all read them).
        self._mem = (
            None
            if mem is None
            else (
                mem / "memory.max_usage_in_bytes",
                mem / "memory.oom_control",
                mem / "memory.usage_in_bytes",
            )
        )
        self._acct = None if acct is None else acct / "cpuacct.usage"
        # A cpu limit's file and value, written again for a kept group's next job.
        self.quota: tuple[Path, str] | None = None

    @property
    def fs(self) -> CgroupFs:
        return self._fs

    def _dirs(self) -> list[Path]:
        return sorted(set(self.groups.values()))

    def procs_files(self) -> tuple[Path, ...]:
        return tuple(d / "cgroup.procs" for d in self._dirs())

    def entry(self) -> tuple[Step, ...] | None:
        """Each hierarchy's `tasks` file takes one thread ("0": the caller). Not with a
        pids limit (the spawning thread would count against it) or pinned cores (the
        thread's own affinity would change with it)."""
        if self._entry is None:
            self._entry = self._steps()
        return self._entry or None

    def _steps(self) -> tuple[Step, ...]:
        if self.homes is None or self.groups.keys() & {"pids", "cpuset"}:
            return ()
        steps: dict[Path, Step] = {}
        for c, path in self.groups.items():
            home = self.homes.get(c)
            if home is None:
                return ()
            steps[path] = Step(path / "tasks", home / "tasks")
        return tuple(steps[p] for p in sorted(steps))

    def pids(self) -> set[int]:
        return set().union(*(self._fs.pids(d) for d in self._dirs()))

    def signal(self, sig: int) -> int:
        # v1 has no cgroup.kill; a process forking meanwhile is caught by the caller's
        # repeated rounds, since its child lands in the same group.
        return kill_pids(self._fs, self._dirs(), sig)

    def usage(self) -> Usage:
        peak = None
        oom = 0
        if self._mem is not None:
            peak = read_int(self._fs, self._mem[0])
            oom = parse_keyed(self._fs.read_if_there(self._mem[1])).get("oom_kill", 0)
        cpu = None
        ns = None
        if self._acct is not None:
            ns = read_int(self._fs, self._acct)
            cpu = None if ns is None else (ns - self._base[0]) / 1e9
        self._last = (ns or 0, oom)
        return Usage(peak_memory_bytes=peak, oom_kills=oom - self._base[1], cpu_time_s=cpu)

    def recycle(self) -> bool:
        """The peak is reset (the kernel sets it to what is charged now: a group still
        charged with more than RECYCLE_MAX_CHARGE, e.g. the page cache of files the job
        wrote, is not reused); cpu time and OOM kills count from the last `usage`."""
        if self._last is None:
            return False
        try:
            if self._mem is not None:
                charged = read_int(self._fs, self._mem[2])
                if charged is None or charged > RECYCLE_MAX_CHARGE:
                    return False
                self._fs.write(self._mem[0], "0")
            if self.quota is not None:
                # Its bandwidth afresh (the kernel refills a group whose quota is
                # written): the next job, and the thread that spawns it standing in the
                # group, never wait out a period its last job used up.
                self._fs.write(*self.quota)
        except CgroupError:
            return False
        self._base, self._last = self._last, None
        return True

    def remove(self) -> None:
        remove_groups(self._fs, self._dirs())


class V1Backend(CgroupBackend):
    """Creates job groups under `bases[controller]` (rbs's base group per hierarchy)."""

    name = "v1"

    def __init__(
        self,
        bases: Mapping[str, Path],
        fs: CgroupFs | None = None,
        homes: Mapping[str, Path] | None = None,
    ) -> None:
        unknown = set(bases) - set(CONTROLLERS)
        if unknown:
            raise ValueError(f"unsupported v1 controllers {sorted(unknown)}; use {CONTROLLERS}")
        self.bases = dict(bases)
        self.fs = fs or CgroupFs()
        # The process's own group per hierarchy, where a spawning thread goes back to
        # (`V1Cgroup.entry`); None: jobs join by pid (detect() knows them).
        self.homes = dict(homes) if homes is not None else None
        # Hierarchies a job never needs here (hybrid: v2 accounts cpu time, not cpuacct).
        self.skip: frozenset[str] = frozenset()

    def describe(self) -> str:
        return "cgroup v1 " + " ".join(f"{c}:{p}" for c, p in sorted(self.bases.items()))

    def sweep(self) -> list[Path]:
        groups = sorted({g for base in set(self.bases.values()) for g in self.fs.children(base)})
        remove_groups(self.fs, groups)
        return groups

    def create(self, key: str, limits: Limits) -> V1Cgroup:
        name = group_name(key)
        skip = cgroup_pin.optional_controllers(limits) | self.skip
        if limits.pids_max is None and self.bases.keys() & {"memory", "cpu"}:
            skip.add("pids")  # a group with no limit to enforce: one join less per job
        groups = {c: base / name for c, base in self.bases.items() if c not in skip}
        made: list[Path] = []
        try:
            for path in sorted(set(groups.values())):
                make_group(self.fs, path, parents=1)
                made.append(path)
            configure_v1(self.fs, groups, limits)
        except CgroupError:
            with contextlib.suppress(CgroupError):
                remove_groups(self.fs, made)
            raise
        group = V1Cgroup(self.fs, groups, unlimited_notes(limits, set(groups)), self.homes)
        if limits.cpus is not None and "cpu" in groups:
            group.quota = (
                groups["cpu"] / "cpu.cfs_quota_us",
                str(limits.cpu_quota_us(CPU_PERIOD_US)),
            )
        return group


def configure_v1(fs: CgroupFs, groups: Mapping[str, Path], limits: Limits) -> None:
    """Write the limits into each controller's group."""
    mem = groups.get("memory")
    if limits.memory_bytes is not None and mem is not None:
        # limit_in_bytes first: memsw may never be below it.
        fs.write(mem / "memory.limit_in_bytes", str(limits.memory_bytes))
        memsw = mem / "memory.memsw.limit_in_bytes"
        if fs.exists(memsw):
            fs.write(memsw, str(limits.memory_bytes))
    cpu = groups.get("cpu")
    if limits.cpus is not None and cpu is not None:
        if CPU_PERIOD_US != KERNEL_PERIOD_US:  # a new group has the kernel's default
            fs.write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        fs.write(cpu / "cpu.cfs_quota_us", str(limits.cpu_quota_us(CPU_PERIOD_US)))
    pids = groups.get("pids")
    if limits.pids_max is not None and pids is not None:
        fs.write(pids / "pids.max", str(limits.pids_max))
    cgroup_pin.write_v1(fs, dict(groups), limits)
