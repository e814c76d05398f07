"""The log store's chunk format: a run of lines as the API's NDJSON plus two small
columns, zstd-compressed (pure, no I/O).

A chunk is the zstd frame of one or more *segments* laid end to end (appending lines to
a chunk adds a segment and compresses again). A segment holds consecutive lines of one
job:

    u32 n, u16 r, u32 bn              lines, distinct (task, attempt, rank) runs, and
                                      the byte size of the NDJSON
    r x (i32 task, i32 attempt, i32 rank)   task -1: not an array
    n x u8 stream                     STREAM_CODES: 0 out, 1 err, 2 sys
    n x u8 run                        index into the r runs
    n x u32 line size                 bytes of each line's NDJSON, its newline included
    the NDJSON, UTF-8                 each line byte for byte as GET /v1/jobs/{id}/logs
                                      sends it (rbs.wire.jobs_api.log_lines_payload)

Integers are little-endian. A line is rendered once, when it is stored, display number
and all (a chunk's numbers never change: it holds the job's lines first_seq .. first_seq
+ n - 1, its row says first_seq). Serving a whole segment is then one slice of the
decompressed chunk, and a part of one (`after`, `tail`, a task filter) slices by the
line sizes; nothing is formatted per line. Reading lines back as values
(`segment_lines`) is `json.loads` per line. The NDJSON compresses to a few bytes more a
line than the columns of format chunks-1 did (its keys repeat in every line, which zstd
takes almost for free); rbs.server.log_migrate moves a chunks-1 store. Worker line
numbers are not stored: de-duplication keeps, per run, the ranges of worker numbers
already stored (rbs.server.job_logs).

Stream kinds share the store: `LOG_KIND` chunks hold log lines; `TELEMETRY_KIND`
chunks hold telemetry samples (rbs.server.telemetry, its own format, same table).
"""

from __future__ import annotations

import bisect
import json
import struct
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate

import zstandard

from rbs.model import LogLine, LogStream

LOG_KIND = 0
TELEMETRY_KIND = 1  # reserved: telemetry samples, in their own segment format

STREAM_CODES = {LogStream.OUT: 0, LogStream.ERR: 1, LogStream.SYS: 2}
STREAM_NAMES = tuple(s.value for s in sorted(STREAM_CODES, key=STREAM_CODES.__getitem__))
CHUNK_RAW = 128 << 10  # raw bytes a chunk grows to before the next one starts
CHUNK_LINES = 8192
LEVEL = 3  # zstd level: at 3, compressing costs far less than the SQLite write

_HEAD = struct.Struct("<IHI")
_RUN = struct.Struct("<iii")
_SWAP = sys.byteorder != "little"
_MAX_RUNS = 255  # one u8 per line names its run

Run = tuple[int | None, int, int]  # task (None: not an array), attempt, rank

_compressor = zstandard.ZstdCompressor(level=LEVEL)
_decompressor = zstandard.ZstdDecompressor()


class Segment:
    """One segment, decoded: `runs[run_of[i]]` is line i's run, `sizes[i]` the bytes of
    its NDJSON in `ndjson`."""

    __slots__ = ("ndjson", "run_of", "runs", "sizes", "streams")

    def __init__(
        self, streams: bytes, run_of: bytes, runs: list[Run], sizes: array[int], ndjson: bytes
    ) -> None:
        self.streams = streams
        self.run_of = run_of
        self.runs = runs
        self.sizes = sizes
        self.ndjson = ndjson

    def __len__(self) -> int:
        return len(self.sizes)


def _le(a: array[int]) -> bytes:
    if _SWAP:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def encode_segments(lines: Sequence[LogLine], first_seq: int) -> bytes:
    """The raw (uncompressed) segments of consecutive lines, numbered from `first_seq`
    (their `seq` is the worker's), at most 255 runs each."""
    out: list[bytes] = []
    start = 0
    while start < len(lines):
        quote = json.encoder.encode_basestring  # json.dumps's form, ensure_ascii=False
        end, rendered, streams, run_of, runs = _render(lines, start, first_seq, quote)
        whole = "".join(rendered)
        try:
            ndjson = whole.encode()
        except UnicodeEncodeError:  # a lone surrogate: that text in JSON's \uXXXX form
            end, rendered, streams, run_of, runs = _render(lines, start, first_seq, _quote_utf8)
            whole = "".join(rendered)
            ndjson = whole.encode()
        if len(ndjson) == len(whole):  # ASCII: a line's bytes are its characters
            sizes = array("I", map(len, rendered))
        else:
            sizes = array("I", (len(x.encode()) for x in rendered))
        out.append(_HEAD.pack(len(rendered), len(runs), len(ndjson)))
        out.extend(_RUN.pack(-1 if k[0] is None else k[0], k[1], k[2]) for k in runs)
        out += (bytes(streams), bytes(run_of), _le(sizes), ndjson)
        start = end
    return b"".join(out)


def _render(
    lines: Sequence[LogLine], start: int, first_seq: int, quote: Callable[[str], str]
) -> tuple[int, list[str], bytearray, bytearray, list[Run]]:
    """Lines from `start` as NDJSON, byte for byte what rbs.wire.jobs_api.log_lines_payload
    makes of them numbered from `first_seq`, up to the 256th distinct run: (end, lines,
    stream codes, run indexes, runs). The hot path of ingest: one f-string a line, a run's
    closing fields formatted once, runs compared field by field instead of as tuples."""
    out_, err = LogStream.OUT, LogStream.ERR
    mids = [f', "stream": "{name}", "text": ' for name in STREAM_NAMES]
    rendered: list[str] = []
    streams, run_of = bytearray(), bytearray()
    runs: dict[Run, int] = {}
    ends: list[str] = []
    task: object = ()  # no run yet: unequal to any task
    attempt = rank = r = 0
    tail = ""
    seq = first_seq + start
    end = start
    for ln in lines[start:]:
        if ln.task != task or ln.attempt != attempt or ln.rank != rank:
            task, attempt, rank = ln.task, ln.attempt, ln.rank
            key = (ln.task, attempt, rank)
            found = runs.get(key)
            if found is None:
                if len(runs) == _MAX_RUNS:
                    break
                found = runs[key] = len(runs)
                t = "null" if ln.task is None else str(ln.task)
                ends.append(f', "task": {t}, "attempt": {attempt}, "rank": {rank}}}\n')
            r, tail = found, ends[found]
        s = ln.stream
        c = 0 if s is out_ else 1 if s is err else 2
        rendered.append(f'{{"seq": {seq}, "time": {ln.time!r}{mids[c]}{quote(ln.text)}{tail}')
        streams.append(c)
        run_of.append(r)
        seq += 1
        end += 1
    return end, rendered, streams, run_of, list(runs)


def _quote_utf8(text: str) -> str:
    """`text` as a JSON string literal that encodes to UTF-8: json.dumps's form, or its
    ASCII form (\\uXXXX escapes) for a text holding a lone surrogate."""
    quoted = json.encoder.encode_basestring(text)
    try:
        quoted.encode()
    except UnicodeEncodeError:
        return json.encoder.encode_basestring_ascii(text)
    return quoted


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
        n, r, size = _HEAD.unpack_from(raw, o)
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
        sizes = _uints(mv[o : o + 4 * n])
        o += 4 * n
        ndjson = raw[o : o + size]
        o += size
        yield Segment(streams, run_of, runs, sizes, ndjson)


def segment_lines(ndjson: bytes) -> Iterator[LogLine]:
    """Stored NDJSON lines back as LogLines (display numbers as `seq`)."""
    loads = json.loads
    for line in ndjson.split(b"\n")[:-1]:
        d = loads(line)
        yield LogLine(
            seq=d["seq"],
            time=d["time"],
            stream=LogStream(d["stream"]),
            text=d["text"],
            task=d["task"],
            attempt=d["attempt"],
            rank=d["rank"],
        )


def pieces(lines: Sequence[LogLine], room_lines: int, room_raw: int) -> Iterator[Sequence[LogLine]]:
    """Split lines into chunk-sized pieces, the first one sized to the room left."""
    # A line's NDJSON is its text plus about 100 bytes of keys and numbers.
    sizes = list(accumulate(100 + len(ln.text) for ln in lines))
    start = 0
    while start < len(lines):
        used = sizes[start - 1] if start else 0
        end = min(start + room_lines, bisect.bisect_right(sizes, used + room_raw, lo=start))
        end = max(end, start + 1)
        yield lines[start:end]
        start = end
        room_lines, room_raw = CHUNK_LINES, CHUNK_RAW
