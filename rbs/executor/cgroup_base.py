"""What every cgroup backend offers a job: limits in, a group to join, kill, usage out.

A backend (v1, v2, hybrid, none) is detected once per worker by `rbs.executor.cgroups`.
For each job it creates one `JobCgroup`; the job process joins it before it execs,
the runner kills through it and reads peak memory, OOM kills and cpu time from it, and
removes it when the job has ended. All file access goes through `CgroupFs` so that the
writing logic is tested against a plain folder that stands in for /sys/fs/cgroup.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import resource
import secrets
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# The kernel needs a moment to tear down killed tasks before a group can be removed;
# this bounds how long `remove()` waits for that.
REMOVE_WAIT_S = 5.0


class CgroupError(Exception):
    """A cgroup could not be created, configured, joined or read."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Resource limits for one job; None means unlimited."""

    cpus: float | None = None
    memory_bytes: int | None = None
    pids_max: int | None = None
    cpu_set: str | None = None  # cpuset.cpus, e.g. "0-3,6" (rbs.executor.cgroup_pin)
    io_bps: int | None = None  # read and write bytes/s each, on `io_device` ("MAJ:MIN")
    io_device: str | None = None

    def __post_init__(self) -> None:
        if self.cpus is not None and not self.cpus > 0:
            raise ValueError(f"cpus must be > 0 (got {self.cpus}); leave it unset for no cpu limit")
        if self.memory_bytes is not None and self.memory_bytes < 1 << 20:
            raise ValueError(
                f"memory limit {self.memory_bytes} bytes is below 1 MiB; "
                "give the limit in bytes, e.g. 67108864 for 64 MiB"
            )
        if self.pids_max is not None and self.pids_max < 1:
            raise ValueError(f"pids_max must be >= 1 (got {self.pids_max})")

    def cpu_quota_us(self, period_us: int) -> int:
        """The CFS quota for `cpus` over one period; the kernel refuses less than 1 ms."""
        assert self.cpus is not None
        return max(1000, round(self.cpus * period_us))


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What a job used, as far as the backend can tell; None where it cannot."""

    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    cpu_time_s: float | None = None


# Control files kept open at most (`CgroupFs`; a quarter of the fd limit, if lower);
# past it, files are opened per call.
MAX_KEPT_FDS = min(256, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4)


class CgroupFs:
    """File access to a cgroup filesystem; tests subclass it to emulate the kernel.

    A file read or written is kept open (one fd per file and direction, at most
    MAX_KEPT_FDS): a kept job group serves many jobs, whose start and end read and write
    the same few files, and a write or `pread` on an open fd costs a fraction of an
    open, write and close on cgroupfs (a `pread` at offset 0 shows the file afresh).
    `rmdir` closes the fds of the group it removes first; a file whose group went away
    meanwhile reads as missing, as it would opened anew.
    """

    def mkdir(self, path: Path) -> None:
        path.mkdir()

    def rmdir(self, path: Path) -> None:
        self._forget(path)
        path.rmdir()

    def exists(self, path: Path) -> bool:
        return path.exists()

    def children(self, path: Path) -> list[Path]:
        """The sub-groups of a group (missing group: none)."""
        try:
            return sorted(p for p in path.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def read(self, path: Path) -> str:
        try:
            return self._read_small(path).decode()
        except OSError as e:
            raise CgroupError(f"cannot read {path}: {e.strerror or e}") from e

    def read_if_there(self, path: Path) -> str | None:
        """A file's text, or None when it (or its group) does not exist: one open where
        `exists` and `read` make a stat and an open."""
        try:
            return self._read_small(path).decode()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CgroupError(f"cannot read {path}: {e.strerror or e}") from e

    def write(self, path: Path, value: str) -> None:
        # cgroupfs takes one value per write(2), so write it whole in a single call.
        data = value.encode()
        for _ in range(2):  # a kept fd whose group went away: once more, opened anew
            try:
                fd, kept = self._fd(path, os.O_WRONLY)
            except OSError as e:
                raise CgroupError(
                    f"cannot open {path} to write {value!r}: {e.strerror or e}", e.errno
                ) from e
            try:
                os.write(fd, data)
                return
            except OSError as e:
                if kept and e.errno == errno.ENODEV:
                    self._drop(path, os.O_WRONLY, fd)
                    continue
                raise CgroupError(
                    f"cannot write {value!r} to {path}: {e.strerror or e}", e.errno
                ) from e
            finally:
                if not kept:
                    os.close(fd)

    def pids(self, group: Path) -> set[int]:
        """The processes in a group (missing group: none)."""
        try:
            text = self._read_small(group / "cgroup.procs")
        except FileNotFoundError:
            return set()
        except OSError as e:
            raise CgroupError(f"cannot list processes of {group}: {e.strerror or e}") from e
        return {int(p) for p in text.split()}

    # ---- kept fds -----------------------------------------------------------------

    def _kept(self) -> dict[tuple[str, int], int]:
        # Created on first use: subclasses that emulate the kernel need not call up.
        kept: dict[tuple[str, int], int] = self.__dict__.setdefault("_kept_fds", {})
        return kept

    def _fd(self, path: Path, flags: int) -> tuple[int, bool]:
        """An fd for `path` and whether it is kept (else the caller closes it)."""
        kept = self._kept()
        key = (str(path), flags)
        fd = kept.get(key)
        if fd is not None:
            return fd, True
        fd = os.open(path, flags | os.O_CLOEXEC)
        if len(kept) >= MAX_KEPT_FDS:
            return fd, False
        other = kept.setdefault(key, fd)  # another thread may have opened it meanwhile
        if other != fd:
            os.close(fd)
        return other, True

    def _drop(self, path: Path, flags: int, fd: int) -> None:
        if self._kept().pop((str(path), flags), None) == fd:
            os.close(fd)

    def _forget(self, group: Path) -> None:
        """Close the kept fds of the files in `group` (about to be removed)."""
        kept = self._kept()
        prefix = f"{group}/"
        for key in [k for k in kept if k[0].startswith(prefix)]:
            fd = kept.pop(key, None)
            if fd is not None:
                os.close(fd)

    def _read_small(self, path: Path) -> bytes:
        """A cgroup file's bytes: raw reads, as text I/O costs more than the read per job."""
        for _ in range(2):  # a kept fd whose group went away: once more, opened anew
            fd, kept = self._fd(path, os.O_RDONLY)
            try:
                chunks: list[bytes] = []
                offset = 0
                while chunk := os.pread(fd, 65536, offset):
                    chunks.append(chunk)
                    offset += len(chunk)
                return b"".join(chunks)
            except OSError as e:
                if not (kept and e.errno == errno.ENODEV):
                    raise
                self._drop(path, os.O_RDONLY, fd)
            finally:
                if not kept:
                    os.close(fd)
        raise FileNotFoundError(errno.ENOENT, "its group was removed", str(path))


def read_keyed(fs: CgroupFs, path: Path) -> dict[str, int]:
    """Parse a flat keyed file such as memory.events or cpu.stat ("key value" lines)."""
    return parse_keyed(fs.read(path))


def parse_keyed(text: str | None) -> dict[str, int]:
    """A flat keyed file's text as a dict (None, a missing file: empty)."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def read_int(fs: CgroupFs, path: Path) -> int | None:
    """An integer file, or None when it does not exist on this kernel."""
    text = fs.read_if_there(path)
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() else None


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def group_name(key: str) -> str:
    """A unique, filesystem-safe group name for a job key such as "job-12.3.a1"."""
    safe = _UNSAFE.sub("_", key).strip("._")[:64] or "job"
    # Random suffix: two workers (or two tests) on one host may run the same job key.
    return f"{safe}-{secrets.token_hex(4)}"


_SCOPE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}")


def check_scope(scope: str) -> str:
    """A scope names one worker's folder of job groups, so that it can sweep its own."""
    if not _SCOPE.fullmatch(scope):
        raise ValueError(
            f"cgroup scope {scope!r} must be 1-64 letters, digits, '_', '-' or '.', "
            "not starting with '.'; use the worker's name"
        )
    return scope


def make_group(fs: CgroupFs, path: Path, parents: int = 0) -> None:
    """Create `path`, and first its missing `parents` nearest ancestors (rbs's base)."""
    try:
        try:
            fs.mkdir(path)  # the base normally exists: one system call per job group
        except FileNotFoundError:
            if not parents:
                raise
            for ancestor in reversed(path.parents[:parents]):
                if not fs.exists(ancestor):
                    with contextlib.suppress(FileExistsError):
                        fs.mkdir(ancestor)
            fs.mkdir(path)
    except OSError as e:
        raise CgroupError(f"cannot create cgroup {path}: {e.strerror or e}", e.errno) from e


def kill_pids(fs: CgroupFs, groups: list[Path], sig: int) -> int:
    """Signal every process in `groups`; returns how many were signalled."""
    pids: set[int] = set()
    for g in groups:
        pids |= fs.pids(g)
    sent = 0
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            sent += 1
    return sent


def remove_groups(fs: CgroupFs, groups: list[Path], kill: bool = True) -> None:
    """Remove groups once empty, SIGKILLing leftovers; waits at most REMOVE_WAIT_S."""
    deadline = time.monotonic() + REMOVE_WAIT_S
    pending = list(groups)  # a missing group reads as removed below
    delay = 0.001
    while pending:
        # rmdir first: a finished job's groups are normally empty, and listing them to
        # find nobody to kill costs more than the rmdir that succeeds.
        still: list[Path] = []
        for g in pending:
            try:
                fs.rmdir(g)
            except FileNotFoundError:
                pass
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise CgroupError(f"cannot remove cgroup {g}: {e.strerror or e}") from e
                still.append(g)
        pending = still
        if pending:
            if kill:
                kill_pids(fs, pending, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise CgroupError(
                    f"cgroups {', '.join(map(str, pending))} still hold processes after "
                    f"{REMOVE_WAIT_S:.0f}s; remove them by hand once those exit"
                )
            # Killed tasks leave the group asynchronously; nothing to wait on in v1.
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


@dataclass(frozen=True, slots=True)
class Step:
    """One move a spawning thread makes so that its child is born in a job's group:
    "0" (the caller) written to `enter`, and to `home` once the child is spawned.
    `process`: the file moves the whole process (a v2 group's cgroup.procs), not just
    the calling thread (a v1 hierarchy's tasks)."""

    enter: Path
    home: Path
    process: bool = False


class JobCgroup(ABC):
    """One job's cgroup (possibly one directory per v1 hierarchy)."""

    description: str
    notes: tuple[str, ...]

    def entry(self) -> tuple[Step, ...] | None:
        """How a thread stands in this group while it spawns the job, so that the job is
        born in it (rbs.executor.supervisor_spawn); None where it cannot (then the job
        joins by pid before it execs: the shim)."""
        return None

    @abstractmethod
    def procs_files(self) -> tuple[Path, ...]:
        """The cgroup.procs files a new process writes its pid to, in order."""

    def join(self, pid: int) -> None:
        for f in self.procs_files():
            self.fs.write(f, str(pid))

    @property
    @abstractmethod
    def fs(self) -> CgroupFs: ...

    @abstractmethod
    def pids(self) -> set[int]:
        """Every process still in the group."""

    @abstractmethod
    def signal(self, sig: int) -> int:
        """Send `sig` to every process in the group; returns how many got it."""

    def kill(self) -> None:
        """SIGKILL the whole group."""
        self.signal(signal.SIGKILL)

    @abstractmethod
    def usage(self) -> Usage: ...

    @abstractmethod
    def remove(self) -> None:
        """Kill what is left and remove the group."""

    def recycle(self) -> bool:
        """Ready an empty group for another job with the same limits: its counters read
        zero again (reset, or a baseline kept). False when it cannot be (then removed)."""
        return False


class CgroupBackend(ABC):
    """Creates one `JobCgroup` per job under rbs's base group."""

    name: str

    @abstractmethod
    def create(self, key: str, limits: Limits) -> JobCgroup:
        """Create and configure a group for the job `key`; raises CgroupError."""

    @abstractmethod
    def describe(self) -> str:
        """One line for logs: the kind of backend and where it creates groups."""

    @abstractmethod
    def sweep(self) -> list[Path]:
        """Kill and remove every job group in this backend's scope, e.g. those a previous
        run of this worker left behind; returns the groups removed."""

    def release(self, group: JobCgroup, *, empty: bool) -> None:
        """A job has ended: remove its group (`empty`: no process was left in it; a pool
        may then keep the group for a later job, rbs.executor.cgroup_pool)."""
        group.remove()


class NullCgroup(JobCgroup):
    """No cgroup: limits are not enforced and usage comes from rusage instead."""

    def __init__(self, reason: str, notes: tuple[str, ...] = ()) -> None:
        self.reason = reason
        self.description = f"none ({reason})"
        self.notes = notes
        self._fs = CgroupFs()

    @property
    def fs(self) -> CgroupFs:
        return self._fs

    def procs_files(self) -> tuple[Path, ...]:
        return ()

    def entry(self) -> tuple[Step, ...] | None:
        return ()

    def pids(self) -> set[int]:
        return set()

    def signal(self, sig: int) -> int:
        return 0

    def usage(self) -> Usage:
        return Usage()

    def remove(self) -> None:
        pass


class NullBackend(CgroupBackend):
    """The fallback when no cgroup hierarchy is usable; says why."""

    name = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def create(self, key: str, limits: Limits) -> JobCgroup:
        return NullCgroup(self.reason, unlimited_notes(limits, set(), "no cgroup"))

    def describe(self) -> str:
        return f"none: {self.reason}"

    def sweep(self) -> list[Path]:
        return []


def unlimited_notes(limits: Limits, have: set[str], why: str = "") -> tuple[str, ...]:
    """Notes for limits that were asked for but that no available controller enforces."""
    asked = {
        "memory": limits.memory_bytes is not None,
        "cpu": limits.cpus is not None,
        "pids": limits.pids_max is not None,
        "cpuset": limits.cpu_set is not None,
        "blkio": limits.io_bps is not None and limits.io_device is not None,
    }
    if "io" in have:  # v2's name for blkio
        have = have | {"blkio"}
    return tuple(
        f"{c} limit not enforced: {why or f'no {c} controller available'}"
        for c, wanted in asked.items()
        if wanted and c not in have
    )
