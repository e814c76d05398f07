"""A run's secrets on the worker: taken out of the lease's env, and masked in its log.

The server puts each secret in the lease's environment with `RBS_SECRETS` naming them
(rbs.server.secrets). `split` moves them into the RunSpec's own `secrets` field, which
the supervisor adds to the job's environment at spawn and nowhere else (no file on the
worker holds them), and `Masker` replaces every occurrence of a value in the run's log
lines with `***` before a line reaches the spool. A value split by a line break is
masked line by line (each line of 8 characters or more); one that straddles the point
where an over-long line is cut (`max_line_chars`) is not. A --pty run's terminal
stream is masked as bytes by `RawMasker` before it leaves the supervisor. What the job
writes to files, its outputs included, is not masked.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from rbs.executor.joblog import LineSplitter

NAMES_ENV = "RBS_SECRETS"  # as rbs.server.secrets sets it
MASK = "***"
MIN_CHARS = 8
# How long RawMasker holds back bytes that may begin a value, waiting for the rest.
HOLD_S = 0.25


def split(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str] | None]:
    """The env without its secrets, and the secrets (None when the lease has none); a
    ValueError names a secret the server had no value for."""
    rest = dict(env)
    names = [n for n in rest.pop(NAMES_ENV, "").split(",") if n]
    if not names:
        return rest, None
    missing = [n for n in names if n not in rest]
    if missing:
        raise ValueError(
            f"the server sent no value for secret {missing[0]} (was its file deleted?); "
            "submit the job again with --secret"
        )
    return rest, {n: rest.pop(n) for n in names}


def _parts(secrets: Mapping[str, str] | None) -> list[str]:
    """What is masked: each value and each of its lines of MIN_CHARS or more, longest
    first (so a value is masked whole before any line of it)."""
    parts: set[str] = set()
    for value in (secrets or {}).values():
        parts.add(value)
        parts.update(line for line in value.splitlines() if len(line) >= MIN_CHARS)
    return sorted((p for p in parts if len(p) >= MIN_CHARS), key=len, reverse=True)


class Masker:
    """Replaces secret values in log text with `***`, longest first."""

    def __init__(self, secrets: Mapping[str, str] | None) -> None:
        self._values = _parts(secrets)

    @property
    def active(self) -> bool:
        return bool(self._values)

    def text(self, line: str) -> str:
        for value in self._values:
            if value in line:
                line = line.replace(value, MASK)
        return line


class MaskingSplitter(LineSplitter):
    """A LineSplitter whose lines come out masked."""

    def __init__(self, max_chars: int, masker: Masker) -> None:
        super().__init__(max_chars)
        self._masker = masker

    def feed(self, data: bytes) -> list[tuple[str, bool]]:
        return [(self._masker.text(t), eol) for t, eol in super().feed(data)]

    def finish(self) -> list[tuple[str, bool]]:
        return [(self._masker.text(t), eol) for t, eol in super().finish()]


def splitter(max_chars: int, secrets: Mapping[str, str] | None) -> LineSplitter:
    """The line splitter for a run's pipe: masking when the run has secrets."""
    masker = Masker(secrets)
    return MaskingSplitter(max_chars, masker) if masker.active else LineSplitter(max_chars)


class RawMasker:
    """Masks values in a byte stream (a --pty run's terminal) chunk by chunk.

    Whole occurrences are replaced; a chunk's tail that could be the start of a value
    is held back until the next chunk shows whether it is one, for at most HOLD_S
    (`due`, `release`): a prompt is never kept from the user for longer, and a value
    written in pieces further apart than that is not masked. A terminal turns each
    newline into CR LF, so a value's lines are also looked for joined that way."""

    def __init__(self, secrets: Mapping[str, str] | None) -> None:
        values = {p.encode() for p in _parts(secrets)}
        values |= {v.replace(b"\n", b"\r\n") for v in values if b"\n" in v}
        self._values = sorted(values, key=len, reverse=True)
        self._held = b""
        self.due: float | None = None  # when the held bytes go out unchanged

    @property
    def active(self) -> bool:
        return bool(self._values)

    def feed(self, data: bytes) -> bytes:
        """The bytes that can go out now, masked; the rest is held."""
        buf = self._held + data
        for value in self._values:
            if value in buf:
                buf = buf.replace(value, MASK.encode())
        cut = self._prefix_start(buf)
        self._held = buf[cut:]
        self.due = (time.monotonic() + HOLD_S) if self._held else None
        return buf[:cut]

    def release(self) -> bytes:
        """The held bytes (at `due`, or at the stream's end)."""
        out, self._held, self.due = self._held, b"", None
        return out

    def _prefix_start(self, buf: bytes) -> int:
        """Where the longest tail of `buf` that begins some value starts (len: none)."""
        cut = len(buf)
        for value in self._values:
            first = value[:1]
            i = buf.find(first, max(0, len(buf) - len(value) + 1))
            while 0 <= i < cut:
                if value.startswith(buf[i:]):
                    cut = i
                    break
                i = buf.find(first, i + 1)
        return cut


def raw_masker(secrets: Mapping[str, str] | None) -> RawMasker | None:
    """The masker for a run's terminal stream, or None when it has no secrets."""
    masker = RawMasker(secrets)
    return masker if masker.active else None
