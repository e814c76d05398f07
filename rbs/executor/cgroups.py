"""Find out which cgroup setup this host has and return the backend that fits it.

Four shapes occur: pure v2 with controllers (most current hosts), v1 per-controller
hierarchies, hybrid (v1 controllers plus a controller-less v2 mount, as on these
hosts: the v2 group then tracks and kills the job, v1 limits and accounts it), and
none usable (no cgroupfs, or not writable when not root). `detect()` reads
/proc/self/cgroup and /proc/self/mountinfo, nests rbs's groups under the worker's own
group in each hierarchy, and never raises: it falls back to `NullBackend` with the
reason, which the job runner writes into each job's sys log.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

from rbs.executor.cgroup_base import (
    CgroupBackend,
    CgroupError,
    CgroupFs,
    JobCgroup,
    Limits,
    NullBackend,
    Step,
    Usage,
    check_scope,
)
from rbs.executor.cgroup_v1 import CONTROLLERS as V1_CONTROLLERS
from rbs.executor.cgroup_v1 import V1Backend, V1Cgroup
from rbs.executor.cgroup_v2 import BASE, WORKER_LEAF, V2Backend, V2Cgroup, prepare_v2

log = logging.getLogger(__name__)

KINDS = ("auto", "v2", "hybrid", "v1", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """A cgroup filesystem mount from mountinfo."""

    point: Path
    root: str
    fstype: str
    controllers: frozenset[str]


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040).
    return field.encode().decode("unicode_escape") if "\\" in field else field


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup and cgroup2 mounts listed in a /proc/<pid>/mountinfo text."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        opts = set(tail[2].split(","))
        controllers = frozenset(opts & set(V1_CONTROLLERS)) if tail[0] == "cgroup" else frozenset()
        mounts.append(
            Mount(
                point=Path(_unescape(fields[4])),
                root=_unescape(fields[3]),
                fstype=tail[0],
                controllers=controllers,
            )
        )
    return mounts


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """(v1 controller -> group path, v2 group path) from a /proc/<pid>/cgroup text."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, names, path = parts
        if hid == "0" and names == "":
            v2 = path
        else:
            for name in names.split(","):
                v1[name] = path
    return v1, v2


def _under(mount: Mount, path: str) -> Path:
    # A mount may expose only a subtree (containers): paths are relative to its root.
    rel = path
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
        rel = path[len(mount.root) :]
    return mount.point / rel.lstrip("/")


class HybridCgroup(JobCgroup):
    """v1 groups for limits and accounting plus a v2 group that tracks and kills."""

    def __init__(self, v1: V1Cgroup, v2: V2Cgroup) -> None:
        self.v1 = v1
        self.v2 = v2
        self.notes = v1.notes
        self.description = f"hybrid: {v1.description}; tracked by {v2.description}"

    @property
    def fs(self) -> CgroupFs:
        return self.v1.fs

    def procs_files(self) -> tuple[Path, ...]:
        return self.v2.procs_files() + self.v1.procs_files()

    def entry(self) -> tuple[Step, ...] | None:
        v1, v2 = self.v1.entry(), self.v2.entry()
        return None if v1 is None or v2 is None else v1 + v2

    def pids(self) -> set[int]:
        # The v2 group holds every process of the job: each joins it first (before its
        # v1 groups) and children inherit it. One read, not one per hierarchy.
        return self.v2.pids()

    def signal(self, sig: int) -> int:
        if sig == signal.SIGKILL:
            return self.v2.signal(sig) + self.v1.signal(sig)
        return self.v2.signal(sig)

    def usage(self) -> Usage:
        u1 = self.v1.usage()
        if u1.cpu_time_s is not None:
            return u1
        u2 = self.v2.usage()
        return Usage(
            peak_memory_bytes=u1.peak_memory_bytes, oom_kills=u1.oom_kills, cpu_time_s=u2.cpu_time_s
        )

    def remove(self) -> None:
        try:
            self.v2.remove()
        finally:
            self.v1.remove()

    def recycle(self) -> bool:
        return self.v2.recycle() and self.v1.recycle()


class HybridBackend(CgroupBackend):
    """v1 limits with v2 tracking, for hosts whose v2 mount has no controllers."""

    name = "hybrid"

    def __init__(self, v1: V1Backend, v2: V2Backend) -> None:
        self.v1 = v1
        self.v2 = v2
        if v2.fs.exists(v2.base / "cpu.stat"):
            # v2's cpu.stat counts cpu time without a controller: no cpuacct group to join.
            v1.skip = v1.skip | {"cpuacct"}

    def describe(self) -> str:
        return f"hybrid: {self.v1.describe()}; tracking by {self.v2.describe()}"

    def sweep(self) -> list[Path]:
        # v2 first: cgroup.kill takes the whole tree at once.
        return self.v2.sweep() + self.v1.sweep()

    def create(self, key: str, limits: Limits) -> JobCgroup:
        v1 = self.v1.create(key, limits)
        try:
            v2 = self.v2.create(key, Limits())
        except CgroupError:
            with contextlib.suppress(CgroupError):
                v1.remove()
            raise
        return HybridCgroup(v1, v2)


def _v1_backend(
    fs: CgroupFs, mounts: list[Mount], member: dict[str, str], scope: str
) -> V1Backend | None:
    bases: dict[str, Path] = {}
    homes: dict[str, Path] = {}
    for c in V1_CONTROLLERS:
        mount = next((m for m in mounts if c in m.controllers), None)
        if mount is None or c not in member:
            continue
        homes[c] = _under(mount, member[c])
        base = homes[c] / BASE / scope
        try:
            for group in (base.parent, base):
                if not fs.exists(group):
                    with contextlib.suppress(FileExistsError):
                        fs.mkdir(group)
        except OSError as e:
            log.warning("cgroup v1 %s not usable: cannot create %s: %s", c, base, e.strerror or e)
            continue
        bases[c] = base
    if "memory" not in bases and "cpu" not in bases:
        return None
    return V1Backend(bases, fs, homes)


def detect(
    kind: str = "auto",
    *,
    fs: CgroupFs | None = None,
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    mountinfo: Path = Path("/proc/self/mountinfo"),
    scope: str = "default",
    move_self: bool = True,
) -> CgroupBackend:
    """The best usable backend (or the one named by `kind`); NullBackend says why not.

    Job groups go under `<worker's own group>/rbs/<scope>` in each hierarchy; give each
    worker on a host its own scope (its name) so that `sweep()` touches only its jobs.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown cgroup backend {kind!r}; use one of: {', '.join(KINDS)}")
    check_scope(scope)
    if kind == "none":
        return NullBackend("disabled by configuration")
    fs = fs or CgroupFs()
    try:
        member_v1, member_v2 = parse_proc_cgroup(proc_cgroup.read_text())
        mounts = parse_mountinfo(mountinfo.read_text())
    except OSError as e:
        return NullBackend(f"cannot read the process's cgroups: {e}")
    unified = next((m for m in mounts if m.fstype == "cgroup2"), None)
    v2_own = _under(unified, member_v2) if unified and member_v2 is not None else None
    v2_home = v2_own  # the process's own group, where a spawning process goes back to
    if v2_own is not None and v2_own.name == WORKER_LEAF:
        # The leaf a worker moved itself into (prepare_v2): the run supervisor it starts
        # is born there, and its job groups belong under the worker's own group too.
        v2_own = v2_own.parent
    errors: list[str] = []

    def v2_backend() -> V2Backend | None:
        if v2_own is None:
            errors.append("no cgroup2 mount")
            return None
        try:
            return prepare_v2(fs, v2_own, scope=scope, move_self=move_self, home=v2_home)
        except CgroupError as e:
            errors.append(f"cgroup v2: {e}")
            return None

    v2_has_memory = False
    if v2_own is not None:
        with contextlib.suppress(CgroupError):
            v2_has_memory = "memory" in fs.read(v2_own / "cgroup.controllers").split()
    if kind == "v2" or (kind == "auto" and v2_has_memory):
        v2 = v2_backend()
        if v2 is not None:
            return v2
    if kind in ("auto", "v1", "hybrid"):
        v1 = _v1_backend(fs, mounts, member_v1, scope)
        if v1 is None:
            errors.append("no writable cgroup v1 memory or cpu hierarchy")
        elif kind == "v1":
            return v1
        else:
            v2 = v2_backend()
            if v2 is not None:
                return HybridBackend(v1, v2)
            if kind == "auto":
                return v1
    if kind == "auto" and not v2_has_memory:
        # A controller-less v2 group still tracks and kills the whole job.
        v2 = v2_backend()
        if v2 is not None:
            return v2
    reason = "; ".join(dict.fromkeys(errors)) or "no cgroup filesystem mounted"
    return NullBackend(f"{reason} (run the worker as root or in a delegated cgroup to get limits)")
