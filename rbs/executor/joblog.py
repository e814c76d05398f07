"""A job's numbered log: stdout/stderr/sys lines spooled to a JSON-lines file.

Every line gets the next sequence number and is appended to the spool *before* it is
handed on, so a worker that lost its connection re-ships `read_from(seq)` with nothing
lost or repeated. The spool survives a worker restart: reopening it drops a torn last
record (a crash mid-write) and continues the numbering. Records are one JSON object
per line with the seq first; JSON escapes newlines, so every newline in the file ends
a record and `read_from` can binary-search by byte offset instead of scanning.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rbs.model import LogLine, LogStream

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 16 * 1024
# Below this many bytes between the bounds, read_from scans instead of bisecting.
_SCAN_BYTES = 64 * 1024


def record_of(line: LogLine) -> dict[str, object]:
    """A line as its record's fields; task, attempt and rank are not stored: a spool
    holds one run's lines."""
    rec: dict[str, object] = {
        "seq": line.seq,
        "t": line.time,
        "s": line.stream.value,
        "text": line.text,
    }
    if not line.eol:
        rec["eol"] = False
    return rec


def to_record(line: LogLine) -> str:
    """A line as its spool record (one JSON object, no newline)."""
    return json.dumps(record_of(line), ensure_ascii=False, separators=(",", ":"))


def from_record(text: str) -> LogLine:
    return line_of(json.loads(text))


def line_of(rec: Mapping[str, Any]) -> LogLine:
    """A record's fields back into a line."""
    return LogLine(
        seq=int(rec["seq"]),
        time=float(rec["t"]),
        stream=LogStream(rec["s"]),
        text=str(rec["text"]),
        eol=bool(rec.get("eol", True)),
    )


LogSink = Callable[[Sequence[LogLine]], None]
"""Receives each batch of lines after it is spooled; called on the runner's thread."""


class LogSpoolError(Exception):
    """A spool file is unreadable or corrupt."""


class LogSpool:
    """The append-only log of one job, safe to append and read from different threads."""

    def __init__(self, path: Path, *, writable: bool = True) -> None:
        self.path = path
        self.writable = writable
        self._lock = threading.Lock()
        if not writable:
            # A reader beside the process that appends (the run supervisor): it never
            # truncates, and a torn last record is one still being written.
            self._fd = -1
            self._next = self._last_complete() + 1
            return
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        try:
            self._fd = os.open(path, flags, 0o644)
        except FileNotFoundError:  # its folder first (usually there: one call saved)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, flags, 0o644)
        try:
            self._next = self._recover() + 1
        except BaseException:
            os.close(self._fd)
            raise

    def reader(self) -> LogSpool:
        """A read-only view of this spool as it is now, for when another process appends
        from here on; no I/O."""
        return LogSpool.view(self.path, self.next_seq)

    @staticmethod
    def view(path: Path, next_seq: int = 1) -> LogSpool:
        """A read-only view of a spool whose next line is `next_seq` (1: an empty or not
        yet created one), for when another process appends; no I/O."""
        view = object.__new__(LogSpool)
        view.path, view.writable, view._lock = path, False, threading.Lock()
        view._fd, view._next = -1, next_seq
        return view

    def _last_complete(self) -> int:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return 0
        try:
            self._fd = fd
            size = os.fstat(fd).st_size
            end = self._rfind_newline(size)
            if end < 0:
                return 0
            start = self._rfind_newline(end) + 1
            try:
                return from_record(os.pread(fd, end - start, start).decode()).seq
            except (ValueError, KeyError, UnicodeDecodeError) as e:
                raise LogSpoolError(f"log spool {self.path}: corrupt record at {start}: {e}") from e
        finally:
            self._fd = -1
            os.close(fd)

    def _recover(self) -> int:
        """Drop a torn final record and return the last complete seq (0 if none)."""
        size = os.fstat(self._fd).st_size
        last_nl = self._rfind_newline(size)
        if last_nl != size - 1:
            # Bytes after the last newline are a write cut short by a crash.
            log.warning(
                "log spool %s: dropping a torn record of %d bytes", self.path, size - last_nl - 1
            )
            size = last_nl + 1
            os.ftruncate(self._fd, size)
        if size == 0:
            return 0
        start = self._rfind_newline(size - 1) + 1
        record = os.pread(self._fd, size - start, start)
        try:
            return from_record(record.decode()).seq
        except (ValueError, KeyError, UnicodeDecodeError) as e:
            raise LogSpoolError(
                f"log spool {self.path} ends with a corrupt record at byte {start}: {e}; "
                "move the file away to start a fresh log"
            ) from e

    def _rfind_newline(self, end: int) -> int:
        """Offset of the last newline before `end`, or -1."""
        pos = end
        while pos > 0:
            step = min(pos, 8192)
            pos -= step
            i = os.pread(self._fd, step, pos).rfind(b"\n")
            if i >= 0:
                return pos + i
        return -1

    @property
    def next_seq(self) -> int:
        """The seq the next appended line will get."""
        with self._lock:
            return self._next

    def append(
        self, entries: Iterable[tuple[LogStream, str, bool]], now: float | None = None
    ) -> list[LogLine]:
        """Number, timestamp and durably hand to the OS a batch of (stream, text, eol).

        All or nothing: when the write fails (a full disk: OSError), the spool is as it
        was, no seq is used up, and the caller may append the same batch again later.
        """
        if not self.writable:
            raise LogSpoolError(f"log spool {self.path} is open for reading only")
        # Rounded as stored, so a line read back equals the line handed to the sink.
        t = round(time.time() if now is None else now, 6)
        with self._lock:
            first = self._next
            lines = []
            for stream, text, eol in entries:
                lines.append(LogLine(seq=self._next, time=t, stream=stream, text=text, eol=eol))
                self._next += 1
            if lines:
                data = "".join(to_record(line) + "\n" for line in lines).encode()
                view = memoryview(data)
                written = 0
                try:
                    while view:
                        n = os.write(self._fd, view)
                        written += n
                        view = view[n:]
                except OSError:
                    self._next = first
                    if written:  # a torn batch: cut it off again
                        size = os.fstat(self._fd).st_size
                        os.ftruncate(self._fd, size - written)
                    raise
        return lines

    def read_from(self, seq: int, limit: int | None = None) -> list[LogLine]:
        """Lines with seq >= `seq`, in order, at most `limit` of them."""
        if seq < 1:
            raise ValueError(f"log seqs start at 1, got {seq}")
        with self._lock, open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(_offset_of(f, seq, size))
            out: list[LogLine] = []
            for raw in f:
                if not raw.endswith(b"\n") or (limit is not None and len(out) >= limit):
                    break
                line = from_record(raw.decode())
                if line.seq >= seq:
                    out.append(line)
            return out

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> LogSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _seq_at(raw: bytes) -> int:
    return from_record(raw.decode()).seq


def _offset_of(f: IO[bytes], seq: int, size: int) -> int:
    """A record-start offset at or before the first record with seq >= `seq`."""
    lo, hi = 0, size
    while hi - lo > _SCAN_BYTES:
        mid = (lo + hi) // 2
        f.seek(mid - 1)
        f.readline()  # finish the record that straddles mid
        start = f.tell()
        if start >= hi:
            break
        raw = f.readline()
        if not raw.endswith(b"\n"):
            break
        if _seq_at(raw) < seq:
            lo = f.tell()
        else:
            hi = start
    return lo


class LineSplitter:
    """Turns a byte stream into (text, eol) lines: UTF-8 with replacement, long lines
    split at `max_chars`, and a final line without newline kept."""

    def __init__(self, max_chars: int = MAX_LINE_CHARS) -> None:
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self.max_chars = max_chars
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""

    def feed(self, data: bytes) -> list[tuple[str, bool]]:
        text = self._buf + self._decoder.decode(data)
        out: list[tuple[str, bool]] = []
        *complete, rest = text.split("\n")
        for line in complete:
            out.extend(self._chunks(line, eol=True))
        # Keep the unfinished tail, except for whole chunks of an over-long line.
        n = (len(rest) // self.max_chars) * self.max_chars
        out.extend((rest[i : i + self.max_chars], False) for i in range(0, n, self.max_chars))
        self._buf = rest[n:]
        return out

    def finish(self) -> list[tuple[str, bool]]:
        text = self._buf + self._decoder.decode(b"", final=True)
        self._buf = ""
        return self._chunks(text, eol=False) if text else []

    def _chunks(self, line: str, *, eol: bool) -> list[tuple[str, bool]]:
        if len(line) <= self.max_chars:
            return [(line, eol)]
        parts = [line[i : i + self.max_chars] for i in range(0, len(line), self.max_chars)]
        return [(p, False) for p in parts[:-1]] + [(parts[-1], eol)]
