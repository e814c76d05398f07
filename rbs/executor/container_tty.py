"""An interactive container run: its stdin (with --pty, its terminal) joined to the run's.

`rbs job submit -i --pty --container IMAGE -- sh` (docs/design/interactive.md). The
wrapper (rbs.executor.container_exec) runs on the pty its run supervisor holds; the
container is created with a terminal of the engine's (`tty`, `stdin_open`), as `docker
run -it`. This module joins the two: the run's terminal is put in raw mode (so every
byte, ^C included, passes untouched, and the container's terminal does the line
discipline), bytes from it go to the container's attach socket, the socket's bytes
(one raw stream with a tty) come back to it, and the window size follows: at the start
and on each SIGWINCH the wrapper gets (the supervisor sends one when a client says its
size, rbs.executor.supervisor_pty.redraw). The engine sends the payload SIGWINCH only
when the size changes, so a size said again is passed on as a nudge (one row more, then
the size itself): the program in the container's foreground redraws on a reattach.

`-i` without --pty (`run_stdin`): the container's stdin is open, the run's stdin (the
supervisor's pipe) is copied to it and its end closes it (a half-close of the attach
socket); the output comes back framed per stream, to the wrapper's stdout and stderr.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import termios
import threading
import tty
from typing import Any

from rbs.executor.supervisor_pty import get_winsize

READ_CHUNK = 64 * 1024


def create_args(kw: dict[str, Any], pty: bool) -> dict[str, Any]:
    """The SDK's `containers.create` arguments with stdin open, and with `pty` the
    engine's terminal: `run -i`, `run -it`."""
    return {**kw, "tty": pty, "stdin_open": True}


def run(client: Any, ctr: Any) -> None:
    """Start `ctr` joined to this process's terminal (fd 0 and 1) until its output ends."""
    att = client.api.attach_socket(
        ctr.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    )
    sock: socket.socket = getattr(att, "_sock", att)
    sizes = Sizes(ctr)
    saved = _raw(0)
    previous = signal.signal(signal.SIGWINCH, lambda *_: sizes.wanted.set())
    try:
        ctr.start()
        sizes.apply(first=True)
        threading.Thread(target=sizes.loop, daemon=True).start()
        threading.Thread(target=_keys, args=(sock,), daemon=True).start()
        while data := _recv(sock):
            _write_all(1, data)
    finally:
        signal.signal(signal.SIGWINCH, previous)
        sizes.stop = True
        sizes.wanted.set()
        if saved is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(0, termios.TCSADRAIN, saved)
        with contextlib.suppress(OSError):
            sock.close()


class Sizes:
    """The container's window size, set from this terminal's (in a thread: an API call)."""

    def __init__(self, ctr: Any) -> None:
        self.ctr = ctr
        self.last: tuple[int, int] | None = None
        self.wanted = threading.Event()
        self.stop = False

    def loop(self) -> None:
        while True:
            self.wanted.wait()
            self.wanted.clear()
            if self.stop:
                return
            self.apply()

    def apply(self, first: bool = False) -> None:
        try:
            rows, cols = get_winsize(0)
        except OSError:
            return
        if not rows or not cols:
            return
        with contextlib.suppress(Exception):  # the container has ended: nothing to size
            if not first and self.last == (rows, cols):  # said again: a redraw
                self.ctr.resize(height=rows + 1, width=cols)
            self.ctr.resize(height=rows, width=cols)
            self.last = (rows, cols)


def run_stdin(client: Any, ctr: Any) -> None:
    """Start `ctr` (created with `stdin_open`) with this process's stdin as its own (an
    -i run's pipe) until its output ends: the end of ours closes the container's, and
    its output comes back in the engine's frames, each to our stdout or stderr."""
    att = client.api.attach_socket(
        ctr.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    )
    sock: socket.socket = getattr(att, "_sock", att)
    try:
        ctr.start()
        threading.Thread(target=_keys, args=(sock,), daemon=True).start()
        frames = Frames()
        while data := _recv(sock):
            for fd, chunk in frames.feed(data):
                _write_all(fd, chunk)
    finally:
        with contextlib.suppress(OSError):
            sock.close()


class Frames:
    """The engine's attach stream without a tty: frames of an 8-byte header (the stream:
    1 stdout, 2 stderr; 3 zero bytes; the size, 4 bytes big-endian) and their bytes."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """(fd, bytes) of each whole frame so far (stdin's or an unknown stream's: 1)."""
        self.buf += data
        out: list[tuple[int, bytes]] = []
        while len(self.buf) >= 8:
            size = int.from_bytes(self.buf[4:8], "big")
            if len(self.buf) < 8 + size:
                break
            out.append((2 if self.buf[0] == 2 else 1, self.buf[8 : 8 + size]))
            self.buf = self.buf[8 + size :]
        return out


def _raw(fd: int) -> list[Any] | None:
    """Put the terminal on `fd` in raw mode; its settings before (None: not a terminal)."""
    try:
        saved = termios.tcgetattr(fd)
        tty.setraw(fd, termios.TCSANOW)
    except (termios.error, OSError):
        return None
    return saved


def _keys(sock: socket.socket) -> None:
    """This terminal's bytes to the container's, until either end closes."""
    while True:
        try:
            data = os.read(0, READ_CHUNK)
        except OSError:
            data = b""
        if not data:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            return
        try:
            sock.sendall(data)
        except OSError:
            return


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(READ_CHUNK)
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue
        except OSError:
            return
