"""An interactive run's stdin inside the supervisor: a pipe fed without ever blocking.

The supervisor's one loop must not wait on a job that reads slowly, so `Input` bytes
go into a buffer; what the pipe takes is written at once, the rest when the loop sees
the pipe writable (`pending` says to poll it). `eof` closes the pipe once the buffer is
empty: the job reads its end. A job that closed its stdin (EPIPE) gets nothing more.
Standard library only (the supervisor starts fast).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
from collections.abc import Sequence

# Bytes held for a job that does not read; past it, input is dropped (a terminal
# cannot type this much, a pipe into `-i` waits on the server's side first).
MAX_BUFFER = 8 << 20


class StdinFeed:
    """The write end of one run's stdin pipe."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd: int | None = fd
        self._buf = bytearray()
        self._eof = False
        self.dropped = 0  # bytes dropped: over MAX_BUFFER, or the job closed its stdin

    @property
    def pending(self) -> bool:
        """Bytes wait for the pipe to take them: poll it for writing."""
        return self.fd is not None and bool(self._buf)

    def feed(self, data_b64: str, eof: bool, winsize: Sequence[int] | None = None) -> None:
        """Queue input (`winsize`: a terminal's, rbs.executor.supervisor_pty; a pipe has none)."""
        try:
            data = base64.b64decode(data_b64, validate=True)
        except (binascii.Error, ValueError):
            data = b""
        if self.fd is None:
            self.dropped += len(data)
            return
        room = MAX_BUFFER - len(self._buf)
        self.dropped += max(0, len(data) - room)
        self._buf += data[: max(0, room)]
        self._eof = self._eof or eof
        self.flush()

    def flush(self) -> None:
        """Write what the pipe takes now; close it after the last byte once at eof."""
        while self.fd is not None and self._buf:
            try:
                n = os.write(self.fd, self._buf)
            except BlockingIOError:
                return
            except OSError:  # EPIPE: the job closed its stdin or ended
                self.dropped += len(self._buf)
                self._buf.clear()
                self.close()
                return
            del self._buf[:n]
        if self._eof:
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
