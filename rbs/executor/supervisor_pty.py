"""A --pty run's terminal inside the supervisor: the pty pair, the job's stdio on it, its size.

`rbs job submit -i --pty` (docs/design/interactive.md). The supervisor opens a pty
pair for the run; the job is spawned in a new session (`posix_spawn`'s setsid) and,
as its first file action, opens the slave by name as fd 0: a session leader that opens
a terminal without O_NOCTTY gets it as its controlling terminal, so the job's shell
has job control and the line discipline turns a typed Ctrl-C into SIGINT for the
foreground process group. Fds 1 and 2 are the same slave; the go-ahead pipe is fd 3
(the shim closes it before exec), since stdin is the terminal now.

The supervisor keeps the master alone (the slave closed once the job holds it, so a
read gives EIO once every process of the job has closed it: the end of output). The
master is read in the supervisor's one poll loop like a pipe: each chunk goes raw to
the daemon (an `Output` event, for attached clients) and, split at newlines, into the
log, each line as the terminal was left showing it (`_uncr`). Input goes to a dup of
the master through a `PtyFeed`, non-blocking with the stdin feed's bounded buffer;
`Input.winsize` sets the window size (TIOCSWINSZ on the master: the kernel sends the
job SIGWINCH), and sends SIGWINCH itself when the size is unchanged, so each client
that attaches (it says its size first) gets the screen redrawn.
Standard library only (the supervisor starts fast).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import grp
import os
import signal
import struct
import termios
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rbs.executor.joblog import LineSplitter
from rbs.executor.jobsecrets import RawMasker
from rbs.executor.supervisor_proto import Output
from rbs.executor.supervisor_stdin import StdinFeed
from rbs.model import LogStream

DEFAULT_WINSIZE = (24, 80)  # until the client says its own
# The go-ahead on fd 3; the job's stdin stays the terminal.
SHIM_PTY = 'cd -- "$0" || exit 125; read -r _ <&3 || exit 125; exec 3<&-; exec "$@"'


@dataclass(frozen=True, slots=True)
class Stdio:
    """How a run's stdio is set up: what the job gets, what the supervisor reads."""

    shim: str
    actions: list[tuple[Any, ...]]  # posix_spawn file actions
    readers: tuple[tuple[int, LogStream], ...]  # the supervisor's ends, read in its loop
    child: tuple[int, ...]  # the job's ends, closed here once it is spawned
    master: int | None = None  # a --pty run's master (one of `readers`)

    @property
    def fds(self) -> tuple[int, ...]:
        return (*(fd for fd, _ in self.readers), *self.child)

    def feed(self, go_w: int | None, stdin: bool) -> StdinFeed | None:
        """After the go-ahead: the run's input feed (the master's, or the go-ahead
        pipe's for an interactive run), or none (the pipe closed: /dev/null). A run
        born in its cgroup had no go-ahead: `go_w` is its stdin pipe, or None."""
        if go_w is not None and (self.master is not None or not stdin):
            os.close(go_w)
        if self.master is not None:
            return PtyFeed(self.master)
        return StdinFeed(go_w) if stdin and go_w is not None else None

    def wrap(
        self,
        fd: int,
        inner: LineSplitter,
        lease_id: str,
        send: Callable[[Output], None],
        masker: RawMasker | None = None,
    ) -> LineSplitter:
        """The splitter for reader `fd`: the master's also sends each chunk raw (with
        `masker`, its secrets masked: rbs.executor.jobsecrets.RawMasker)."""
        if fd != self.master:
            return inner
        return CrSplitter(inner, lambda data: send(output_event(lease_id, data)), masker)


def stdio(pty: bool, go_r: int | None, shim: str, uid: int | None) -> Stdio:
    """Pipes for stdout and stderr, the go-ahead pipe as stdin (`shim` reads it); or
    with `pty` the terminal for all three (owned by `uid`, the run's own, if any).
    `go_r` None: no go-ahead, and stdin is /dev/null (rbs.executor.supervisor_spawn)."""
    if not pty:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        dup = os.POSIX_SPAWN_DUP2
        stdin: tuple[Any, ...] = (
            (dup, go_r, 0)
            if go_r is not None
            else (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
        )
        actions: list[tuple[Any, ...]] = [stdin, (dup, out_w, 1), (dup, err_w, 2)]
        return Stdio(
            shim, actions, ((out_r, LogStream.OUT), (err_r, LogStream.ERR)), (out_w, err_w)
        )
    master, slave = os.openpty()
    try:
        set_winsize(master, *DEFAULT_WINSIZE)
        if uid is not None:  # its terminal is its own, as a login's is
            own_terminal(slave, uid)
        name = os.ttyname(slave)
    except OSError:
        os.close(master)
        os.close(slave)
        raise
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, name, os.O_RDWR, 0),  # after setsid: the controlling tty
        (os.POSIX_SPAWN_DUP2, 0, 1),
        (os.POSIX_SPAWN_DUP2, 0, 2),
        *([(os.POSIX_SPAWN_DUP2, go_r, 3)] if go_r is not None else []),
    ]
    return Stdio(SHIM_PTY, actions, ((master, LogStream.OUT),), (slave,), master)


def set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def own_terminal(slave: int, uid: int) -> None:
    """The slave as a login's terminal is: the run's uid, the tty group, mode 0620, so
    the job (running as `uid`) can open it by name or as /dev/tty."""
    try:
        gid = grp.getgrnam("tty").gr_gid
    except KeyError:
        gid = -1
    os.fchown(slave, uid, gid)
    os.fchmod(slave, 0o620)


def redraw(fd: int, rows: int, cols: int) -> None:
    """Set the window size; when it is unchanged (the kernel then sends nothing) send
    SIGWINCH to the terminal's foreground process group all the same, so a program on
    it redraws for the client that (re)attached, as ssh and tmux users expect."""
    same = get_winsize(fd) == (rows, cols)
    set_winsize(fd, rows, cols)
    if same:
        with contextlib.suppress(OSError):  # no foreground group (yet, or any more)
            os.killpg(os.tcgetpgrp(fd), signal.SIGWINCH)


def get_winsize(fd: int) -> tuple[int, int]:
    rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    return rows, cols


class PtyFeed(StdinFeed):
    """Input for a --pty run: written to (a dup of) its master, as typed. An `eof` is
    the terminal's end-of-file character (^D at the start of a line), not a close: the
    terminal stays the job's."""

    def __init__(self, master: int) -> None:
        super().__init__(os.dup(master))

    def feed(self, data_b64: str, eof: bool, winsize: Sequence[int] | None = None) -> None:
        if winsize is not None and self.fd is not None and len(winsize) == 2:
            with contextlib.suppress(OSError, OverflowError, struct.error):
                redraw(self.fd, int(winsize[0]), int(winsize[1]))
        if eof:
            data_b64 = base64.b64encode(base64.b64decode(data_b64 or "") + b"\x04").decode()
        super().feed(data_b64, False)


class CrSplitter(LineSplitter):
    """A splitter for terminal output: each chunk to `raw` as read, and the lines of
    `inner` without the carriage return a terminal puts before each newline."""

    def __init__(
        self, inner: LineSplitter, raw: Callable[[bytes], None], masker: RawMasker | None = None
    ) -> None:
        self.inner = inner  # no super().__init__(): `inner` does the splitting
        self.raw = raw
        self.masker = masker

    @property
    def due(self) -> float | None:
        """When bytes the masker holds back go out (`release`), if it holds any."""
        return self.masker.due if self.masker is not None else None

    def release(self) -> None:
        if self.masker is not None and (held := self.masker.release()):
            self.raw(held)

    def feed(self, data: bytes) -> list[tuple[str, bool]]:
        out = self.masker.feed(data) if self.masker is not None else data
        if out:
            self.raw(out)
        return [(_uncr(t, eol), eol) for t, eol in self.inner.feed(data)]

    def finish(self) -> list[tuple[str, bool]]:
        self.release()
        return [(_uncr(t, eol), eol) for t, eol in self.inner.finish()]


def _uncr(text: str, eol: bool) -> str:
    """A line as the terminal was left showing it, near enough: the carriage return
    before its newline dropped, and only what follows its last other one (a prompt
    redrawn, a progress bar's last state)."""
    if eol and text.endswith("\r"):
        text = text[:-1]
    return text.rsplit("\r", 1)[-1]


def output_event(lease_id: str, data: bytes) -> Output:
    """A chunk of a --pty run's terminal output, for the daemon."""
    return Output(lease_id=lease_id, data=base64.b64encode(data).decode())
