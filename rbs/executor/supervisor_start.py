"""Starting runs off the supervisor's loop: a few threads wait out each spawn.

A start may block: creating and configuring the cgroups, and moving a process into a
group by pid (the shim's way), wait for the kernel, milliseconds on a loaded host. On
the one loop these waits would queue every other run's events and starts behind them,
so a small fixed pool of threads (not one per run) runs `SupervisedRun.start`; what the
run asks of the loop meanwhile (log lines, fds to poll, a kill) is kept in its
`Starting` and handed to the loop once the start is over (`completed`), woken by a
pipe the loop polls. A start that waits on neither (`start_here`: a kept group, a job
born in it) is made on the loop itself, sparing the hand-off to a thread and back.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import threading
from dataclasses import dataclass, field

from rbs.executor.cgroup_base import CgroupBackend, NullBackend
from rbs.executor.cgroup_pool import CgroupPool
from rbs.executor.cgroup_v2 import V2Backend
from rbs.executor.supervisor_proto import RunSpec
from rbs.executor.supervisor_run import SupervisedRun
from rbs.executor.supervisor_spawn import end_private_fs, private_fs
from rbs.model import LogLine

SPAWN_THREADS = 2  # spawns take turns (supervisor_spawn.SPAWN_LOCK); fewer threads, cheaper moves


@dataclass(slots=True)
class Starting:
    """What a run being started asked of the loop."""

    lines: list[LogLine] = field(default_factory=list)
    fds: dict[int, str] = field(default_factory=dict)  # fd -> "pipe" or "pidfd"
    kill: tuple[str, str] | None = None  # reason, message: a KillRun that came meanwhile
    error: BaseException | None = None


class Starter:
    """The spawn threads and the runs they are starting. A thread ends once no start
    waits: every thread of the supervisor moves with it into a job's v2 group and back
    (rbs.executor.supervisor_spawn), each one a cost, and most starts are the loop's."""

    def __init__(self, threads: int = SPAWN_THREADS) -> None:
        self._max = threads
        self._queue: collections.deque[SupervisedRun] = collections.deque()
        self._lock = threading.Lock()
        self._threads = 0
        self._done: queue.SimpleQueue[SupervisedRun] = queue.SimpleQueue()
        self.wake_r, self._wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.starting: dict[SupervisedRun, Starting] = {}

    def submit(self, run: SupervisedRun) -> None:
        self.starting[run] = Starting()
        with self._lock:
            self._queue.append(run)
            if self._threads >= self._max:
                return
            self._threads += 1
        threading.Thread(target=self._work, name="rbs-spawn").start()

    def _work(self) -> None:
        # A current directory of its own: a job born in its cgroup starts in the
        # spawning thread's (rbs.executor.supervisor_spawn).
        private_fs()
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._threads -= 1
                        return
                    run = self._queue.popleft()
                try:
                    run.start()
                except BaseException as e:  # the loop fails the run with it
                    self.starting[run].error = e
                self._done.put(run)
                with contextlib.suppress(BlockingIOError):  # full: the loop is woken already
                    os.write(self._wake_w, b"\0")
        finally:
            end_private_fs()

    def state(self, run: SupervisedRun) -> Starting | None:
        """The run's `Starting` while its start is under way (any thread may ask)."""
        return self.starting.get(run)

    def forget_fd(self, fd: int) -> bool:
        """A starting run closed an fd it had asked to have polled."""
        return any(st.fds.pop(fd, None) is not None for st in list(self.starting.values()))

    def completed(self) -> list[tuple[SupervisedRun, Starting]]:
        """The runs whose start is over, with what they asked for (loop thread only)."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake_r, 4096):
                pass
        out: list[tuple[SupervisedRun, Starting]] = []
        while True:
            try:
                run = self._done.get_nowait()
            except queue.Empty:
                return out
            out.append((run, self.starting.pop(run)))


def start_here(backend: CgroupBackend, spec: RunSpec) -> bool:
    """Whether the loop starts the run itself: one that takes a kept group (or needs
    none) and is born in it (rbs.executor.supervisor_spawn) waits on no mkdir and no
    cgroup lock of the kernel, and skips the hand-off to a spawn thread and back."""
    if spec.users or spec.pids_max is not None:  # started through the shim
        return False
    if spec.cpu_set is not None or spec.io_bps is not None:  # a group of its own
        return False
    inner = backend.inner if isinstance(backend, CgroupPool) else backend
    if isinstance(inner, NullBackend):
        return True
    if isinstance(inner, V2Backend) and inner.controllers:  # joined by pid: the shim
        return False
    return isinstance(backend, CgroupPool) and backend.idle() > 0
