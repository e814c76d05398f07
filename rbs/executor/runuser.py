"""Runs under users of their own: the uid range, a host-wide pool, and how a run drops to one.

A worker started as root with `--run-uids FIRST-LAST` runs each job and each build
action as a uid of that range that no other live run holds (uid = gid, no
supplementary groups, no_new_privs), so no run can read another's
`/proc/PID/environ`, the worker's environment or files, or another run's folders.

- **The pool** is host-wide: a uid is held by an flock on `<lock dir>/<uid>`
  (`/run/rbs/run-uids`, 0700, by default), so two workers on one host, and a worker's
  daemon (build actions) and its run supervisor (jobs), never hand out one uid twice.
  The kernel drops a lock when its holder dies. Uids are taken round-robin, so a
  released uid is reused as late as the range allows.
- **The drop** is util-linux's `setpriv` (`--reuid --regid --clear-groups
  --no-new-privs`), exec'd in front of the run's own argv, so it works from
  `posix_spawn` (the supervisor) and from a thread (the daemon) alike, with no Python
  between fork and exec.
- **A private /tmp**: where the host allows a mount namespace (probed once at start),
  `unshare --mount` runs a bind of the run's own tmp folder onto /tmp before the drop;
  elsewhere the run has only its TMPDIR (a 0700 folder of its own) and /tmp is the
  host's. `private_tmp` says which; each run's log says so too.
- **What is left behind**: processes of a run are killed through its cgroup or
  process group; where neither tracks them (build actions, hosts without cgroups)
  `kill_uid` kills every process of the uid before it goes back to the pool.

Standard library only: the run supervisor imports it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import logging
import os
import pwd
import random
import shutil
import signal
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_LOCK_DIR = "/run/rbs/run-uids"
# The suggested range: above the usual login (1000-60000), systemd (61184-65519) and
# nobody (65534) uids, 64 Ki uids wide.
log = logging.getLogger(__name__)

SUGGESTED = "200000-265535"
MAX_UID = 2**32 - 2  # (uid_t)-1 means "no change" to setresuid
# Bind the run's tmp folder ($0) onto /tmp inside the new mount namespace, then go on.
MOUNT_TMP = '{mount} --bind -- "$0" /tmp || exit 125; exec "$@"'


class RunUserError(ValueError):
    """A --run-uids value, or a host, that cannot give runs users of their own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UidRange:
    """The uids runs may take, inclusive; each run's gid is its uid."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last <= MAX_UID:
            raise RunUserError(
                f"--run-uids {self.first}-{self.last}: give FIRST-LAST with "
                f"1 <= FIRST <= LAST <= {MAX_UID}, e.g. {SUGGESTED}"
            )

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


def parse_range(text: str) -> UidRange:
    """`FIRST-LAST` (e.g. 200000-265535) as a range, or an error naming the flag."""
    first, sep, last = text.strip().partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise RunUserError(f"--run-uids {text!r}: give FIRST-LAST, e.g. {SUGGESTED}")
    return UidRange(first=int(first), last=int(last))


def check_range(uids: UidRange) -> None:
    """Refuse a range holding a uid that is someone already: a user of this host, or
    the worker's own; a run must not become them."""
    own = os.getuid()
    if own in uids:
        raise RunUserError(f"--run-uids {uids}: holds the worker's own uid {own}")
    for entry in pwd.getpwall():
        if entry.pw_uid in uids:
            raise RunUserError(
                f"--run-uids {uids}: uid {entry.pw_uid} is the user {entry.pw_name!r} "
                f"of this host; choose a range no user has (e.g. {SUGGESTED})"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUsers:
    """How this worker's runs get users: the range, where its locks live, whether a
    run's /tmp is its own (a mount namespace) or only its TMPDIR is."""

    uids: UidRange
    lock_dir: str = DEFAULT_LOCK_DIR
    private_tmp: bool = True

    def describe(self, uid: int) -> str:
        tmp = (
            "a private /tmp (its tmp folder mounted there)"
            if self.private_tmp
            else "no private /tmp (its TMPDIR is its own)"
        )
        return f"user: uid {uid} gid {uid} (no other groups, no_new_privs), {tmp}"


def setup(text: str | None, work_dir: Path, *, lock_dir: str = DEFAULT_LOCK_DIR) -> RunUsers | None:
    """The worker's run users from --run-uids, after checking this host can give them:
    None without the flag; RunUserError when it cannot (not root, no setpriv, a work
    dir runs cannot reach)."""
    if text is None:
        return None
    uids = parse_range(text)
    if os.geteuid() != 0:
        raise RunUserError(
            f"--run-uids {uids}: the worker must run as root to switch users "
            f"(it runs as uid {os.geteuid()}); leave the flag out to run jobs as this user"
        )
    if "setpriv" not in tools():
        raise RunUserError(f"--run-uids {uids}: setpriv (util-linux) is not installed")
    check_range(uids)
    check_reachable(work_dir)
    Path(lock_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(lock_dir, 0o700)
    return RunUsers(
        uids=uids,
        lock_dir=lock_dir,
        private_tmp=_can_mount_tmp() and not _under(work_dir, Path("/tmp")),
    )


def check_reachable(work_dir: Path) -> None:
    """Runs must traverse every folder above their own: each ancestor of the work dir
    needs the others' x bit (the work dir itself is set to 0711 by `lock_down`)."""
    here = work_dir.resolve().parent
    for folder in (here, *here.parents):
        with contextlib.suppress(FileNotFoundError):
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                raise RunUserError(
                    f"--run-uids: runs cannot reach the work dir {work_dir}: {folder} is not "
                    f"searchable by other users (chmod o+x it, or choose a --work-dir such "
                    f"as /var/lib/rbs-worker)"
                )


def _under(path: Path, top: Path) -> bool:
    return path.resolve().is_relative_to(top.resolve())


def _can_mount_tmp() -> bool:
    """Whether `unshare --mount` and a bind onto /tmp work here (a container may refuse)."""
    found = tools()
    if "unshare" not in found or "mount" not in found:
        return False
    try:
        done = subprocess.run(
            [found["unshare"], "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
             MOUNT_TMP.format(mount=found["mount"]), "/tmp", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def lock_down(work_dir: Path) -> None:
    """The worker's folders as runs with other uids must find them: the work dir and
    the parents of run folders traversable but not listable (0711), the CAS and
    everything else of the worker's closed (0700 folders, 0600 files)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(work_dir, 0o711)
    for name in ("jobs", "sandboxes"):
        (work_dir / name).mkdir(exist_ok=True)
        os.chmod(work_dir / name, 0o711)
    for entry in os.scandir(work_dir):
        if entry.name in ("jobs", "sandboxes") or entry.is_symlink():
            continue
        with contextlib.suppress(OSError):
            os.chmod(entry.path, 0o700 if entry.is_dir() else 0o600)


def give(path: Path, uid: int) -> None:
    """Make a run's folder its user's: `path` and what is under it, symlinks not
    followed, and `path` itself 0700. Hardlinks into the worker's CAS are left as
    they are (the CAS's own, read-only), so a run cannot change a cached blob."""
    os.lchown(path, uid, uid)
    os.chmod(path, 0o700)
    for top, dirs, files in os.walk(path):
        for name in dirs:
            os.lchown(os.path.join(top, name), uid, uid)
        for name in files:
            p = os.path.join(top, name)
            st = os.lstat(p)
            if st.st_nlink == 1 or stat.S_ISLNK(st.st_mode):
                os.lchown(p, uid, uid)


def container_user(config: str, uid: int) -> None:
    """Make a container run's payload run as `uid` (gid the same): its `container.json`
    (the worker's, 0600, outside the mounted folder) names the user the engine starts."""
    with open(config) as f:
        data = json.load(f)
    data["user"] = f"{uid}:{uid}"
    data["run_uid"] = True
    tmp = config + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, config)


def wrap(argv: list[str], uid: int, tmp: str | None) -> list[str]:
    """`argv` run as `uid` (gid the same, no other groups, no_new_privs); with `tmp`,
    in a mount namespace of its own with that folder at /tmp."""
    found = tools()
    drop = [
        found["setpriv"],
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--no-new-privs",
        "--",
        *argv,
    ]
    if tmp is None:
        return drop
    return [found["unshare"], "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
            MOUNT_TMP.format(mount=found["mount"]), tmp, *drop]  # fmt: skip


@functools.cache
def tools() -> dict[str, str]:
    """The tools `wrap` runs, by absolute path (a run's PATH is the job's, not ours),
    looked up once per process on the worker's PATH and the usual folders."""
    path = f"{os.environ.get('PATH', '')}:/usr/bin:/bin:/usr/sbin:/sbin"
    found = {t: shutil.which(t, path=path) for t in ("setpriv", "unshare", "mount")}
    return {t: p for t, p in found.items() if p is not None}


def kill_uid(uid: int) -> int:
    """SIGKILL every process whose (effective) user is `uid`; how many were found."""
    n = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{name}").st_uid == uid:
                os.kill(int(name), signal.SIGKILL)
                n += 1
    return n


class NoFreeUid(RuntimeError):
    """Every uid of the range is held by a live run."""


class UidPool:
    """Hands out uids of a range that no other holder on this host has (module docstring)."""

    def __init__(self, users: RunUsers) -> None:
        self.users = users
        self._held: dict[int, int] = {}  # uid -> the fd of its lock
        self._next = random.randrange(users.uids.size)  # workers start apart
        self._lock = threading.Lock()  # runs start on threads and end on the loop

    def acquire(self) -> int:
        with self._lock:
            return self._acquire()

    def _acquire(self) -> int:
        uids = self.users.uids
        for _ in range(uids.size):
            uid = uids.first + self._next
            self._next = (self._next + 1) % uids.size
            if uid in self._held:
                continue
            fd = os.open(
                os.path.join(self.users.lock_dir, str(uid)),
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                0o600,
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    continue
                raise
            self._held[uid] = fd
            return uid
        raise NoFreeUid(f"all {uids.size} uids of --run-uids {uids} are held by live runs")

    def release(self, uid: int) -> None:
        with self._lock:
            fd = self._held.pop(uid, None)
        if fd is not None:
            os.close(fd)

    @property
    def held(self) -> frozenset[int]:
        return frozenset(self._held)


def no_users_warning(*, worker: bool = False) -> str:
    """The guarantees that do not hold when runs share the worker's uid: for a run's log,
    or with `worker` for the worker's at start."""
    who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    hint = (
        "start the worker with --run-uids FIRST-LAST"
        if os.geteuid() == 0
        else "run the worker as root with --run-uids FIRST-LAST"
    )
    if not worker:  # in every job's log: short
        return (
            f"the job runs as the worker's own user ({who}): it can read the worker's token "
            f"and CAS, other runs' files and /proc/PID/environ, and /tmp is shared; to "
            f"isolate runs, {hint}"
        )
    return (
        f"jobs and build actions run as the worker's own user ({who}), not uids of their "
        f"own: they can read the worker's environment and files (its token, its CAS) and "
        f"other runs' folders and /proc/PID/environ, and /tmp is shared; to isolate runs, {hint}"
    )


_POOLS: dict[tuple[int, int, str], UidPool] = {}
_POOLS_LOCK = threading.Lock()


def as_spec(users: RunUsers, tmp: Path) -> dict[str, object]:
    """What a RunSpec carries (`users`) for a run whose tmp folder is `tmp`."""
    return {
        "first": users.uids.first,
        "last": users.uids.last,
        "lock_dir": users.lock_dir,
        "private_tmp": users.private_tmp,
        "tmp": str(tmp),
    }


def pool_for(spec: Mapping[str, Any]) -> UidPool:
    """This process's pool for a RunSpec's `users` (one per range and lock dir)."""
    key = (int(spec["first"]), int(spec["last"]), str(spec["lock_dir"]))
    with _POOLS_LOCK:
        return _POOLS.get(key) or _POOLS.setdefault(key, _new_pool(key, spec))


def _new_pool(key: tuple[int, int, str], spec: Mapping[str, Any]) -> UidPool:
    uids = UidRange(first=key[0], last=key[1])
    return UidPool(RunUsers(uids=uids, lock_dir=key[2], private_tmp=bool(spec.get("private_tmp"))))


def announce(users: RunUsers | None, work_dir: Path) -> None:
    """Log at the worker's start which guarantees hold; with users, close the work dir."""
    if users is None:
        log.warning("%s", no_users_warning(worker=True))
        return
    lock_down(work_dir)
    tmp = (
        "each with its tmp folder at /tmp (a mount namespace)"
        if users.private_tmp
        else "with a TMPDIR of its own but the host's /tmp (no mount namespace here"
        + (", or the work dir is under /tmp)" if _under(work_dir, Path("/tmp")) else ")")
    )
    log.info(
        "jobs and build actions run as uids %s (one per run, no other groups, no_new_privs), "
        "%s; the work dir %s is closed to them but for their own folders",
        users.uids,
        tmp,
        work_dir,
    )


class Seat:
    """One run's user: taken from the pool before it starts, given back after it ended.
    With no `users` (no --run-uids) it changes nothing and says so."""

    def __init__(self, users: Mapping[str, Any] | None, folder: str) -> None:
        self.users = users
        # The run's folders: the one it works in, and its tmp (mounted at /tmp).
        self.folders: tuple[str, ...] = (folder, str(users["tmp"])) if users else ()
        self.uid: int | None = None

    def take(self, note: Callable[[str], None]) -> str | None:
        """Take a uid, make the folders its own and `note` the log's line; or the error
        why it cannot start. Without users, `note` the guarantees that do not hold."""
        if self.users is None:
            note(no_users_warning())
            return None
        try:
            pool = pool_for(self.users)
            uid = pool.acquire()
        except (OSError, NoFreeUid, KeyError, ValueError) as e:
            return f"no run user for it: {e}"
        try:
            for folder in self.folders:
                give(Path(folder), uid)
            if self.users.get("container"):  # a container run: the payload takes the uid
                container_user(str(self.users["container"]), uid)
        except OSError as e:
            pool.release(uid)
            return f"cannot give its folders to uid {uid}: {e}"
        self.uid = uid
        note(pool.users.describe(uid))
        return None

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` as the run's user (unchanged without one, and for a container run,
        whose wrapper must reach the engine's socket and whose payload is the uid)."""
        if self.uid is None or self.users is None or self.users.get("container"):
            return argv
        return wrap(argv, self.uid, self.folders[1] if self.users.get("private_tmp") else None)

    def give_back(self, *, kill: bool) -> None:
        """After the run: its folders closed to its uid (the worker's again, 0700), with
        `kill` every process left of that uid killed, and only then the uid back in the
        pool, so a later run with it finds nothing of this one."""
        uid, self.uid = self.uid, None
        if uid is None or self.users is None:
            return
        for folder in self.folders:
            with contextlib.suppress(OSError):
                os.chown(folder, 0, 0)
                os.chmod(folder, 0o700)
        if kill:
            kill_uid(uid)
        pool_for(self.users).release(uid)
