"""The client's half of a --pty job's terminal: raw mode, the window size, ssh-style escapes.

`rbs job submit -i --pty` and `rbs job attach` on a --pty job (rbs.cli.job_attach;
docs/design/interactive.md). The local terminal is put in raw mode, so every key, Ctrl-C
and Ctrl-D included, goes to the job as a byte, and the job's terminal (the line
discipline on the worker) decides what it means. `RawMode` restores the terminal's
settings on every way out (`raw_mode`): a normal end, an exception, a signal that
ends the attachment (the caller turns SIGTERM and SIGHUP into a detach).

Escapes, as ssh's, are read only at the start of a line (after Enter, or first):
`~.` detaches (the job keeps running), `~C` cancels the job, `~~` sends one `~`,
`~?` lists them. Any other character after `~` sends both.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
import select
import struct
import termios
import tty
from collections.abc import Iterator

ESCAPE = ord("~")
HELP = (
    "Supported escape sequences (at the start of a line):\r\n"
    " ~.  - detach (the job keeps running; rbs job attach ID reattaches)\r\n"
    " ~C  - cancel the job\r\n"
    " ~?  - this message\r\n"
    " ~~  - send the escape character by typing it twice\r\n"
)


class Action(enum.Enum):
    DETACH = "detach"
    CANCEL = "cancel"
    HELP = "help"


class EscapeParser:
    """Turns the keys typed into bytes for the job and escape actions, in order."""

    def __init__(self) -> None:
        self.line_start = True  # the next key begins a line
        self.pending = False  # a `~` at a line's start, held until the next key

    def feed(self, data: bytes) -> list[bytes | Action]:
        out: list[bytes | Action] = []
        buf = bytearray()
        for byte in data:
            if self.pending:
                self.pending = False
                action = _ACTIONS.get(byte)
                if action is not None:
                    if buf:
                        out.append(bytes(buf))
                        buf.clear()
                    out.append(action)
                    self.line_start = action is Action.HELP  # `~?` leaves it at a start
                    continue
                buf.append(ESCAPE)
                if byte == ESCAPE:  # `~~`: one `~`
                    self.line_start = False
                    continue
            elif self.line_start and byte == ESCAPE:
                self.pending = True
                continue
            buf.append(byte)
            self.line_start = byte in (0x0D, 0x0A)  # Enter is \r in raw mode
        if buf:
            out.append(bytes(buf))
        return out


_ACTIONS = {ord("."): Action.DETACH, ord("C"): Action.CANCEL, ord("?"): Action.HELP}


def window_size(fd: int) -> tuple[int, int] | None:
    """The terminal's (rows, cols), or None when `fd` is not one (or says 0x0)."""
    try:
        packed = fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
    except OSError:
        return None
    rows, cols, _, _ = struct.unpack("HHHH", packed)
    return (rows, cols) if rows and cols else None


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal on `fd` in raw mode inside the block, as it was after it."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (a terminal may take it in parts)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:  # a non-blocking terminal that is full: wait for room
            select.select([], [fd], [], 1.0)
            continue
        view = view[n:]
