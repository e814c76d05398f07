"""Run `python -m rbs` with its stderr on a pseudo-terminal (python's pty): what a person sees."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Sequence
from pathlib import Path


def rbs_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
    env.pop("NO_COLOR", None)
    env.update(RBS_HOME=str(home), TERM="xterm", **extra)
    return env


class PtyRbs:
    """`python -m rbs ARGS`, stderr on a 100-column terminal, stdout on a pipe."""

    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        self.args = list(args)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        self._master = master
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rbs", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=env,
        )
        os.close(slave)
        self.seen = b""  # every byte the terminal received so far
        self._eof = False

    def _read(self, wait: float) -> None:
        ready, _, _ = select.select([self._master], [], [], wait)
        if not ready:
            return
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            data = b""
        if data:
            self.seen += data
        else:
            self._eof = True

    def read_until(self, what: Callable[[bytes], bool], timeout: float = 120) -> bytes:
        """Read the terminal until `what(seen)` holds; fail if the command ends first."""
        deadline = time.monotonic() + timeout
        while not what(self.seen):
            if self._eof or time.monotonic() > deadline:
                raise AssertionError(f"rbs {' '.join(self.args)}: terminal got {self.seen!r}")
            self._read(1.0)
        return self.seen

    def finish(self, timeout: float = 240) -> tuple[int, bytes, bytes]:
        """(exit status, stdout, terminal bytes) once the command ends."""
        deadline = time.monotonic() + timeout
        while not self._eof and time.monotonic() < deadline:
            before = len(self.seen)
            self._read(1.0)
            if self.proc.poll() is not None and len(self.seen) == before:
                break  # ended, and the terminal's buffer is drained
        assert self.proc.stdout is not None
        try:
            rc = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.close()
            raise AssertionError(f"rbs {' '.join(self.args)} ran past {timeout}s") from None
        out = self.proc.stdout.read()
        self.close()
        return rc, out, self.seen

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)
        if self._master >= 0:
            os.close(self._master)
            self._master = -1
        if self.proc.stdout is not None:
            self.proc.stdout.close()
