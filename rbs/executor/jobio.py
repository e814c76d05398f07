"""Read a job's stdout and stderr pipes into log lines, alongside other fds to wait on."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable

from rbs.executor.joblog import LineSplitter
from rbs.model import LogStream

READ_CHUNK = 64 * 1024
# How many reads `pump_ready` does at most: a process left running may write forever.
READY_ROUNDS = 64

Emit = Callable[[list[tuple[LogStream, str, bool]]], object]


class OutputPump:
    """Polls the job's pipes plus any extra fds (wake-up pipe, pidfd) with one poll set.

    Pipes are read in whatever order the kernel reports them ready, so lines of stdout
    and stderr interleave as the job wrote them, to within one read.
    """

    def __init__(self, emit: Emit, max_line_chars: int) -> None:
        self._emit = emit
        self._max = max_line_chars
        self._streams: dict[int, tuple[LogStream, LineSplitter]] = {}
        self._poller = select.poll()

    def add_pipe(self, fd: int, stream: LogStream) -> None:
        os.set_blocking(fd, False)
        self._streams[fd] = (stream, LineSplitter(self._max))
        self._poller.register(fd, select.POLLIN)

    def add_fd(self, fd: int) -> None:
        """Wake `poll` when `fd` is readable; the caller handles it."""
        self._poller.register(fd, select.POLLIN)

    @property
    def open(self) -> bool:
        return bool(self._streams)

    def poll(self, timeout_s: float | None) -> set[int]:
        """Wait up to `timeout_s` (None: forever), log what the pipes had, return the other
        ready fds."""
        ms = None if timeout_s is None else timeout_s * 1000 + 1  # round up, never spin
        others = set()
        for fd, _ in self._poller.poll(ms):
            if fd in self._streams:
                self._pump(fd)
            else:
                others.add(fd)
        return others

    def _pump(self, fd: int) -> None:
        stream, splitter = self._streams[fd]
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        if data:
            self._emit([(stream, text, eol) for text, eol in splitter.feed(data)])
            return
        self._close(fd)

    def _close(self, fd: int) -> None:
        stream, splitter = self._streams.pop(fd)
        self._poller.unregister(fd)
        self._emit([(stream, text, eol) for text, eol in splitter.finish()])

    def pump_ready(self) -> None:
        """Log what the pipes hold right now, without waiting for more."""
        for _ in range(READY_ROUNDS):
            ready = [fd for fd, _ in self._poller.poll(0) if fd in self._streams]
            if not ready:
                return
            for fd in ready:
                self._pump(fd)

    def drain(self, timeout_s: float) -> bool:
        """Read the pipes to EOF; False if some writer still held them at the deadline
        (then their unfinished lines are logged and reading stops)."""
        deadline = time.monotonic() + timeout_s
        while self._streams:
            left = deadline - time.monotonic()
            if left <= 0:
                for fd in list(self._streams):
                    self._close(fd)
                return False
            for fd, _ in self._poller.poll(left * 1000 + 1):
                if fd in self._streams:
                    self._pump(fd)
        return True
