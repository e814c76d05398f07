"""How a supervised run's process comes to be: born in its cgroup, or held by a shim until it is in.

The job must never run an instruction outside its cgroup. Two ways:

- **Born inside** (cgroup v1, the hybrid hosts' v1 plus controller-less v2, a v2 group
  without controllers, and no cgroup at all). The spawn thread stands in the job's
  groups while it spawns, and the kernel starts the child in the groups of the thread
  that forks it: a v1 hierarchy takes one thread (a write of "0" to its `tasks`), a v2
  domain group only a whole process, so then the whole supervisor stands in the job's
  v2 group for the spawn (it has no controllers to limit or charge it). Then it goes
  back. The job is spawned with `posix_spawn` straight away: no shim, no go-ahead.
  Its folder is the thread's own current directory (`private_fs`: the spawn threads
  do not share theirs with the process), so nothing runs in the child but the kernel's
  and libc's own steps between clone and exec. `SPAWN_LOCK` keeps every other spawn of
  the process out while the process stands in a job's v2 group, so no other child is
  born there.
  A --pty run is spawned so too: `posix_spawn` opens the terminal as the job's fd 0
  after its setsid, which makes it the controlling terminal (supervisor_pty).
- **The shim** (a v2 group with controllers: a process in it would be limited and
  charged, and OOM-killed with the job; a uid of its own, dropped by setpriv in front
  of the shim, which then changes to the folder as that uid; a pids limit, against
  which the spawning thread would count; pinned cores, which would move the thread's
  own affinity; a program that is not an executable file format, which only a shell
  runs; a thread without a folder of its own). A tiny /bin/sh is spawned in a new session and
  blocks reading a pipe; its pid is written into the job's groups, then it is let go,
  changes to the run's folder and execs the job. One exec of dash more per job.

Standard library only (the supervisor starts fast).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rbs.executor import supervisor_pty
from rbs.executor.cgroup_base import CgroupError, CgroupFs, JobCgroup, Step
from rbs.executor.supervisor_proto import RunSpec

SHIM = 'cd -- "$0" || exit 125; read -r _ || exit 125; exec </dev/null; exec "$@"'
# An interactive run keeps the go-ahead pipe as its stdin (sh's read takes only "go\n").
SHIM_STDIN = 'cd -- "$0" || exit 125; read -r _ || exit 125; exec "$@"'
# Signals the supervisor ignores and its jobs start with at their defaults.
DEFAULT_SIGNALS = (signal.SIGINT, signal.SIGPIPE)
CLONE_FS = 0x200
# Standing in a job's v2 group: any child the process spawns is born there.
SPAWN_LOCK = threading.Lock()

log = logging.getLogger("rbs.executor.supervisor")
_local = threading.local()


class SpawnError(Exception):
    """The run cannot start; the text says why."""


@dataclass(frozen=True, slots=True)
class Spawned:
    """A spawned job: its pid, how its stdio is set up, its input feed's fd (or None)."""

    pid: int
    io: supervisor_pty.Stdio
    feed_fd: int | None


def private_fs() -> bool:
    """Give the calling thread a current directory of its own (unshare(CLONE_FS)), so
    that it may chdir to a run's folder before it spawns; a spawn thread's initializer.
    False (and runs get the shim) where the kernel refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = bool(libc.unshare(CLONE_FS) == 0)
    except (OSError, AttributeError):
        ok = False
    if not ok:
        log.info("a spawn thread could not get a folder of its own; jobs start through a shim")
    else:  # where it goes back to after each spawn
        _local.home = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    _local.private = ok
    return ok


Wrap = Callable[[list[str]], list[str]]  # an argv, run as the run's uid (runuser.Seat.wrap)


def end_private_fs() -> None:
    """A thread that had `private_fs` and ends: its way-back fd closed."""
    home = getattr(_local, "home", None)
    if home is not None:
        os.close(home)
        _local.home = None
    _local.private = False


def spawn(spec: RunSpec, cgroup: JobCgroup, exe: str, wrap: Wrap, uid: int | None) -> Spawned:
    """Spawn the run's job (`exe`: the program `spec.argv[0]` resolved on the job's
    PATH; `wrap`: the shim's argv as the run's uid, if it has one). Raises SpawnError."""
    steps = cgroup.entry()
    if steps is not None and uid is None and getattr(_local, "private", False):
        try:
            return _born_inside(spec, cgroup.fs, steps, exe)
        except OSError as e:
            if e.errno != errno.ENOEXEC:  # not a binary nor a #! script: sh runs it
                raise SpawnError(f"cannot spawn the job: {e}") from e
    return _through_shim(spec, cgroup, wrap, uid)


def _born_inside(spec: RunSpec, fs: CgroupFs, steps: tuple[Step, ...], exe: str) -> Spawned:
    # An interactive run's stdin: a pipe, or its terminal (then the master takes input).
    go_r, go_w = os.pipe() if spec.stdin and not spec.pty else (None, None)
    try:
        io = supervisor_pty.stdio(spec.pty, go_r, "", None)
    except OSError:
        for fd in (go_r, go_w):
            if fd is not None:
                os.close(fd)
        raise
    try:
        with SPAWN_LOCK:
            os.chdir(spec.cwd)  # this thread's own (private_fs)
            try:
                with standing_in(fs, steps):
                    pid = os.posix_spawn(
                        exe,
                        list(spec.argv),
                        {**spec.env, **(spec.secrets or {})},
                        file_actions=io.actions,
                        setsid=True,
                        setsigdef=DEFAULT_SIGNALS,
                    )
            finally:
                os.fchdir(_local.home)
    except CgroupError as e:
        _close(go_r, go_w, *io.fds)
        raise SpawnError(f"cannot move the job into its cgroup: {e}") from e
    except OSError:
        _close(go_r, go_w, *io.fds)
        raise
    _close(go_r, *io.child)
    return Spawned(pid, io, go_w)


@contextlib.contextmanager
def standing_in(fs: CgroupFs, steps: tuple[Step, ...]) -> Iterator[None]:
    """The calling thread (and for a v2 step, its process) in a job's groups meanwhile.
    A failed entry goes back and raises CgroupError. A failed way back would leave the
    supervisor in a job's group, which a kill of the job's group would kill: it exits
    then (its daemon starts a fresh one, which sweeps every job group)."""
    done: list[Step] = []
    try:
        for step in steps:
            fs.write(step.enter, "0")
            done.append(step)
        yield
    finally:
        for step in reversed(done):
            try:
                fs.write(step.home, "0")
            except CgroupError as e:
                log.critical("cannot leave a job's cgroup (%s): the supervisor exits", e)
                os._exit(70)


def _through_shim(spec: RunSpec, cgroup: JobCgroup, wrap: Wrap, uid: int | None) -> Spawned:
    go_r, go_w = os.pipe()
    shim = SHIM_STDIN if spec.stdin else SHIM
    io: supervisor_pty.Stdio | None = None  # pipes, or a --pty run's terminal
    try:
        io = supervisor_pty.stdio(spec.pty, go_r, shim, uid)
        argv = wrap(["/bin/sh", "-c", io.shim, spec.cwd, *spec.argv])
        with SPAWN_LOCK:
            pid = os.posix_spawn(
                argv[0],
                argv,
                {**spec.env, **(spec.secrets or {})},
                file_actions=io.actions,
                setsid=True,
                setsigdef=DEFAULT_SIGNALS,  # the supervisor ignores them
            )
    except OSError as e:
        _close(go_r, go_w, *(io.fds if io is not None else ()))
        raise SpawnError(f"cannot spawn the job: {e}") from e
    _close(go_r, *io.child)
    try:
        cgroup.join(pid)
    except CgroupError as e:
        os.close(go_w)  # the shim sees EOF and exits without running the job
        os.waitpid(pid, 0)
        _close(*(fd for fd, _ in io.readers))
        raise SpawnError(f"cannot move the job into its cgroup: {e}") from e
    os.write(go_w, b"go\n")
    return Spawned(pid, io, go_w)


def _close(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            os.close(fd)
