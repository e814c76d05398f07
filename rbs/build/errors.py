"""The build's one user-facing exception: what went wrong, where, and how to fix it."""

from __future__ import annotations

import re
from dataclasses import dataclass

_MARKER = re.compile(r"--> (.+?):(\d+):(\d+)")
_FRAME = re.compile(r"^\s*\* (.+?):(\d+), in ", re.MULTILINE)
_ERROR_LINE = re.compile(r"^error: (.*)$", re.MULTILINE)


@dataclass(frozen=True, slots=True, kw_only=True)
class Location:
    """A 1-based position in a workspace file (path relative to the workspace root)."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        if self.column <= 0:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.column}"


class BuildError(Exception):
    """A mistake in the workspace (or a failed build) explained for a person."""

    def __init__(self, message: str, *, location: Location | None = None, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.location = location
        self.hint = hint

    def render(self) -> str:
        where = f"{self.location}: " if self.location else ""
        text = f"{where}error: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def __str__(self) -> str:
        return self.render()


def location_from_starlark(text: str, prefer_file: str | None = None) -> Location | None:
    """The most useful location named in a rendered Starlark error.

    Starlark reports the innermost frame first; a user wants the line of *their* file
    (the BUILD file being loaded) when the error surfaced inside a rule library. Code
    rbs evaluates under a `<...>` name (the prelude) is never named: the innermost frame
    in a real file is, or nothing when there is none.
    """
    markers = [(f, int(ln), int(col)) for f, ln, col in _MARKER.findall(text) if _real(f)]
    frames = [(f, int(ln)) for f, ln in _FRAME.findall(text) if _real(f)]
    if prefer_file is not None:
        for f, ln, col in markers:
            if f == prefer_file:
                return Location(file=f, line=ln, column=col)
        for f, ln in frames:
            if f == prefer_file:
                return Location(file=f, line=ln, column=0)
    if markers:
        f, ln, col = markers[0]
        return Location(file=f, line=ln, column=col)
    if frames:
        f, ln = frames[-1]  # frames run outermost first
        return Location(file=f, line=ln, column=0)
    return None


def _real(file: str) -> bool:
    return not file.startswith("<")


def starlark_message(text: str) -> str:
    """The `error: ...` line of a rendered Starlark error, without Starlark's prefixes."""
    m = _ERROR_LINE.search(text)
    msg = m.group(1) if m else text.strip().splitlines()[0] if text.strip() else text
    for prefix in ("ValueError: ", "BuildError: ", "fail: ", "StarlarkError: "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    # Names rbs.build.lower renamed (`_file` -> `_rbs_user_file`) as the user wrote them.
    return msg.replace("_rbs_user_", "_")


def call_site(stack: str, source_lines: dict[str, list[str]] | None = None) -> Location | None:
    """The outermost frame of a Starlark `call_stack()` text: the BUILD line of a rule call."""
    frames = _FRAME.findall(stack)
    if not frames:
        return None
    f, ln = frames[0]
    line = int(ln)
    col = 0
    lines = (source_lines or {}).get(f)
    if lines and 0 < line <= len(lines):
        text = lines[line - 1]
        col = len(text) - len(text.lstrip()) + 1
    return Location(file=f, line=line, column=col)


def closest(word: str, candidates: list[str]) -> str | None:
    """The candidate most like `word`, if one is close enough to be a likely typo."""
    import difflib

    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None
