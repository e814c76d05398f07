"""A run's secrets on the worker: taken out of the lease's env, and masked in its log.

The server puts each secret in the lease's environment with `RBS_SECRETS` naming them
(rbs.server.secrets). `split` moves them into the RunSpec's own `secrets` field, which
the supervisor adds to the job's environment at spawn and nowhere else (no file on the
worker holds them), and `Masker` replaces every occurrence of a value in the run's log
lines with `***` before a line reaches the spool. A value split by a line break is
masked line by line (each line of 8 characters or more); one that straddles the point
where an over-long line is cut (`max_line_chars`) is not. What the job writes to files,
its outputs included, is not masked.
"""

from __future__ import annotations

from collections.abc import Mapping

from rbs.executor.joblog import LineSplitter

NAMES_ENV = "RBS_SECRETS"  # as rbs.server.secrets sets it
MASK = "***"
MIN_CHARS = 8


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


class Masker:
    """Replaces secret values in log text with `***`, longest first."""

    def __init__(self, secrets: Mapping[str, str] | None) -> None:
        parts: set[str] = set()
        for value in (secrets or {}).values():
            parts.add(value)
            parts.update(line for line in value.splitlines() if len(line) >= MIN_CHARS)
        self._values = sorted((p for p in parts if len(p) >= MIN_CHARS), key=len, reverse=True)

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
