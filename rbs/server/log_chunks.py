"""The log store's chunk format: a run of lines as columns, zstd-compressed (pure, no I/O).

A chunk is the zstd frame of one or more *segments* laid end to end (appending lines to a
chunk adds a segment and compresses again). A segment holds consecutive lines of one job
as columns, which compress far better than rows of mixed fields:

    u32 n, u16 r, u32 bx, u32 bt      lines, distinct (task, attempt, rank) runs, and the
                                      byte sizes of the text and time columns
    r x (i32 task, i32 attempt, i32 rank)   task -1: not an array
    n x u8 stream                     STREAM_CODES: 0 out, 1 err, 2 sys
    n x u8 run                        index into the r runs
    n x u32 text length               characters of each line's text, as a JSON string
    n x u8 time length                characters of each line's time, as a decimal
    the times, concatenated, ASCII    repr() of the worker's float: it reads back exactly
    the texts, concatenated, UTF-8    each a JSON string literal, json.dumps's form with
                                      ensure_ascii=False (surrogatepass: any str fits)

Integers are little-endian. Times and texts are kept in the form the jobs API sends them,
so serving a line is joining strings (no float or string formatting per line, which is
most of the cost of NDJSON in Python); the forms are the standard ones, so reading a line
back (`times`, `texts`) is `float()` and `json.loads()`. The lines' display numbers are
not stored: a chunk holds the job's lines first_seq .. first_seq + n - 1 (its row says
first_seq), in order. Nor are the worker's own line numbers: de-duplication keeps, per
run, the ranges of worker numbers already stored (rbs.server.job_logs).

Stream kinds share the store: `LOG_KIND` chunks hold log lines; `TELEMETRY_KIND` is the
place reserved for telemetry samples (a segment format of their own, same table).
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from itertools import accumulate

import zstandard

from rbs.model import LogLine, LogStream

LOG_KIND = 0
TELEMETRY_KIND = 1  # reserved: telemetry samples, in their own segment format

STREAM_CODES = {LogStream.OUT: 0, LogStream.ERR: 1, LogStream.SYS: 2}
STREAM_NAMES = tuple(s.value for s in sorted(STREAM_CODES, key=STREAM_CODES.__getitem__))
CHUNK_RAW = 64 << 10  # raw bytes a chunk grows to before the next one starts
CHUNK_LINES = 8192
LEVEL = 3  # zstd level: at 3, compressing costs far less than the SQLite write

_HEAD = struct.Struct("<IHII")
_RUN = struct.Struct("<iii")
_SWAP = sys.byteorder != "little"
_MAX_RUNS = 255  # one u8 per line names its run

Run = tuple[int | None, int, int]  # task (None: not an array), attempt, rank

_compressor = zstandard.ZstdCompressor(level=LEVEL)
_decompressor = zstandard.ZstdDecompressor()


class Segment:
    """One segment's columns, decoded; `runs[run_of[i]]` is line i's run.

    `time_text` and `text_json` are the API's forms (a float's repr, a JSON string);
    `times()` and `texts()` read them back as values."""

    __slots__ = ("run_of", "runs", "streams", "text_json", "time_text")

    def __init__(
        self,
        time_text: list[str],
        streams: bytes,
        run_of: bytes,
        runs: list[Run],
        text_json: list[str],
    ) -> None:
        self.time_text = time_text
        self.streams = streams
        self.run_of = run_of
        self.runs = runs
        self.text_json = text_json

    def __len__(self) -> int:
        return len(self.text_json)

    def times(self) -> list[float]:
        return [float(t) for t in self.time_text]

    def texts(self) -> list[str]:
        return [json.loads(x) for x in self.text_json]


def _le(a: array[float] | array[int]) -> bytes:
    if _SWAP:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def encode_segments(lines: Sequence[LogLine]) -> bytes:
    """The raw (uncompressed) segments of consecutive lines, at most 255 runs each."""
    out = []
    start = 0
    while start < len(lines):
        runs: dict[tuple[int, int, int], int] = {}
        end = start
        for ln in lines[start:]:
            key = (-1 if ln.task is None else ln.task, ln.attempt, ln.rank)
            if key not in runs:
                if len(runs) == _MAX_RUNS:
                    break
                runs[key] = len(runs)
            end += 1
        part = lines[start:end]
        if len(runs) == 1:
            run_of = bytes(len(part))
        else:
            run_of = bytes(
                runs[(-1 if ln.task is None else ln.task, ln.attempt, ln.rank)] for ln in part
            )
        quote = json.encoder.encode_basestring  # json.dumps's form, ensure_ascii=False
        texts = [quote(ln.text) for ln in part]
        times = [repr(ln.time) for ln in part]
        text_blob = "".join(texts).encode("utf-8", "surrogatepass")
        time_blob = "".join(times).encode("ascii")
        out.append(_HEAD.pack(len(part), len(runs), len(text_blob), len(time_blob)))
        out.extend(_RUN.pack(*k) for k in runs)
        out.append(bytes([STREAM_CODES[ln.stream] for ln in part]))
        out.append(run_of)
        out.append(_le(array("I", map(len, texts))))
        out.append(bytes(map(len, times)))
        out.append(time_blob)
        out.append(text_blob)
        start = end
    return b"".join(out)


def compress(raw: bytes) -> bytes:
    return _compressor.compress(raw)


def decompress(data: bytes) -> bytes:
    return _decompressor.decompress(data)


def _uints(raw: memoryview) -> array[int]:
    a = array("I")
    a.frombytes(raw)
    if _SWAP:
        a.byteswap()
    return a


def segments(raw: bytes) -> Iterator[Segment]:
    """Decode raw segments (as `encode_segments` wrote them, one after another)."""
    mv = memoryview(raw)
    o = 0
    while o < len(raw):
        n, r, text_size, time_size = _HEAD.unpack_from(raw, o)
        o += _HEAD.size
        runs: list[Run] = []
        for _ in range(r):
            task, attempt, rank = _RUN.unpack_from(raw, o)
            runs.append((None if task < 0 else task, attempt, rank))
            o += _RUN.size
        streams = raw[o : o + n]
        o += n
        run_of = raw[o : o + n]
        o += n
        text_lengths = _uints(mv[o : o + 4 * n])
        o += 4 * n
        time_lengths = raw[o : o + n]
        o += n
        times = _split(raw[o : o + time_size].decode("ascii"), time_lengths)
        o += time_size
        texts = _split(raw[o : o + text_size].decode("utf-8", "surrogatepass"), text_lengths)
        o += text_size
        yield Segment(times, streams, run_of, runs, texts)


def _split(whole: str, lengths: Sequence[int]) -> list[str]:
    ends = list(accumulate(lengths))
    return [whole[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def segment_lines(seg: Segment, first_seq: int) -> Iterator[LogLine]:
    """A segment's lines as LogLines, numbered from `first_seq`."""
    times, texts = seg.times(), seg.texts()
    for i, text in enumerate(texts):
        task, attempt, rank = seg.runs[seg.run_of[i]]
        yield LogLine(
            seq=first_seq + i,
            time=times[i],
            stream=LogStream(STREAM_NAMES[seg.streams[i]]),
            text=text,
            task=task,
            attempt=attempt,
            rank=rank,
        )


def pieces(lines: Sequence[LogLine], room_lines: int, room_raw: int) -> Iterator[Sequence[LogLine]]:
    """Split lines into chunk-sized pieces, the first one sized to the room left."""
    start = 0
    while start < len(lines):
        size = 0
        end = start
        while end < len(lines) and end - start < room_lines:
            size += 32 + len(lines[end].text)
            if size > room_raw and end > start:
                break
            end += 1
        yield lines[start:end]
        start = end
        room_lines, room_raw = CHUNK_LINES, CHUNK_RAW
