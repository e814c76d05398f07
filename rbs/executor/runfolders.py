"""Run folders on a worker: made, emptied and kept for the next run, or removed in batches.

A run's folder (`jobfiles.RunDirs`: `work/`, `tmp/`, `log.jsonl`) costs three mkdirs and
a file create when made, and three rmdirs and an unlink when removed. On ext4 each new
inode costs more the more were recently deleted (here 0.2 ms of kernel CPU per run on a
quiet disk, over 1 ms on a busy one), most of what a worker spent on a short job. Most
short jobs leave their folder as they found it, so a done run's folder is checked
instead, on a pooled thread with other runs' (`add`): when it holds exactly an empty
`work/` and `tmp/` and its spool, all of them the worker's, with the modes the worker
gave them, its spool is emptied (`_empty_file`) and the folder renamed to `.free-<n>`
in the jobs folder. The next run takes one with a single rename to its lease's name
(`make`): no inode is made or freed per run. A folder a job changed in any way is
removed as before, and so is one past `keep`.

Free folders start with a dot, which no lease id does, so no run's name can meet one
(nor the supervisor's `jobs/*/pgid` sweep). A daemon restarted beside a live supervisor
takes the free folders its predecessor left (`adopt`); one starting a fresh supervisor
removes the whole jobs folder, and `reset` forgets them. Runs under uids of their own
(`--run-uids`) never reuse a folder: theirs are given to the run's user.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import itertools
import os
import stat
import uuid
from concurrent.futures import Executor
from pathlib import Path

from rbs.executor.jobfiles import RunDirs, remove, remove_if_empty

FREE_PREFIX = ".free-"
_PARTS = frozenset(("work", "tmp", "log.jsonl"))


class Made(enum.Enum):
    """What `RunFolders.make` found or made for a run."""

    NEW = "new"  # the folder alone, made now: work/ and tmp/ still to make
    REUSED = "reused"  # a free folder: work/ and tmp/ there and empty, its spool empty
    EARLIER = "earlier"  # an earlier try of the same lease left it (its spool goes on)


class RunFolders:
    """The free run folders of one jobs folder, and the batches of done ones to check."""

    DELAY_S = 0.05  # a batch of done folders is handled this long after its first

    def __init__(self, root: Path, pool: Executor, *, keep: int, reuse: bool = True) -> None:
        self.root = root
        self._pool = pool
        self._keep = keep if reuse else 0
        self._free: collections.deque[str] = collections.deque()  # appended on a thread
        self._names = itertools.count()
        self._tag = uuid.uuid4().hex[:8]  # no clash with an earlier daemon's free folders
        self._uid = os.geteuid()
        mask = _umask()
        self._mode = 0o777 & ~mask  # what mkdir gives a folder
        self._spool_mode = 0o644 & ~mask  # and LogSpool a spool
        self._done: list[RunDirs] = []
        self._timer: asyncio.TimerHandle | None = None

    @property
    def free(self) -> int:
        return len(self._free)

    def make(self, dirs: RunDirs) -> Made:
        """A free folder renamed to the run's, else a new one (any thread)."""
        while True:
            try:
                name = self._free.popleft()
            except IndexError:
                break
            try:
                # Refused onto an earlier try's folder, which is not empty (an empty one
                # would be replaced: it held nothing to go on with).
                os.rename(name, dirs.root)
                return Made.REUSED
            except FileNotFoundError:
                continue  # gone (the jobs folder was removed): the next one
            except OSError:
                self._free.appendleft(name)
                break
        try:
            os.mkdir(dirs.root)
        except FileExistsError:
            return Made.EARLIER
        except FileNotFoundError:  # the worker's jobs/ folder is gone: make it again
            dirs.root.mkdir(parents=True, exist_ok=True)
        return Made.NEW

    def add(self, dirs: RunDirs) -> None:
        """A done run's folder: kept for a next run or removed, soon, on a thread."""
        self._done.append(dirs)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.DELAY_S, self._empty)

    def adopt(self) -> None:
        """Take the free folders a previous daemon left (it verified them)."""
        with contextlib.suppress(FileNotFoundError), os.scandir(self.root) as it:
            names = [e.path for e in it if e.name.startswith(FREE_PREFIX)]
        for path in names:
            if len(self._free) < self._keep:
                self._free.append(path)
            else:
                remove(Path(path))

    def reset(self) -> None:
        """The jobs folder was removed: no free folders are left."""
        self._free.clear()

    def close(self) -> None:
        """Handle what is still waiting, now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._done = self._done, []
        self.handle(batch)

    def _empty(self) -> None:
        self._timer = None
        batch, self._done = self._done, []
        asyncio.get_running_loop().run_in_executor(self._pool, self.handle, batch)

    def handle(self, batch: list[RunDirs]) -> None:
        """Free or remove these done runs' folders now, on this thread."""
        for dirs in batch:
            if len(self._free) < self._keep and self._recycle(dirs):
                continue
            if not remove_if_empty(dirs):
                remove(dirs.root)

    def _recycle(self, dirs: RunDirs) -> bool:
        """Empty the run's folder for a next run and free it; False when the job left
        it changed (the caller removes it)."""
        try:
            with os.scandir(dirs.root) as it:
                names = {e.name for e in it}
            if names != _PARTS and names != _PARTS - {"log.jsonl"}:
                return False
            stats = [os.lstat(folder) for folder in (dirs.root, dirs.work, dirs.tmp)]
            # One device: nothing mounted on work/ or tmp/ (a job as root may mount).
            if not all(self._as_made(st) and st.st_dev == stats[0].st_dev for st in stats):
                return False
            for folder in (dirs.work, dirs.tmp):
                with os.scandir(folder) as it:
                    if next(it, None) is not None:
                        return False
            if "log.jsonl" in names:
                st = os.lstat(dirs.spool)
                if (
                    not stat.S_ISREG(st.st_mode)
                    or st.st_uid != self._uid
                    or st.st_nlink != 1
                    or stat.S_IMODE(st.st_mode) != self._spool_mode
                ):
                    return False
                _empty_file(dirs.spool)
            free = os.path.join(self.root, f"{FREE_PREFIX}{self._tag}-{next(self._names)}")
            os.rename(dirs.root, free)
        except OSError:
            return False
        self._free.append(free)
        return True

    def _as_made(self, st: os.stat_result) -> bool:
        return (
            stat.S_ISDIR(st.st_mode)
            and st.st_uid == self._uid
            and stat.S_IMODE(st.st_mode) == self._mode
        )


def _empty_file(path: Path) -> None:
    """Truncate a spool for its next run, keeping its inode: a new file costs an inode
    allocation, which ext4 makes slower the more files were recently deleted (the
    supervisor's create was most of a short job's kernel time). ext4 marks a file
    truncated to zero to be flushed at its next close (auto_da_alloc); closed here with
    nothing left to flush, that mark goes, so the next run's writes stay in memory."""
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else by setting it back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
