"""Job log lines on the server: zstd-compressed chunks of rendered NDJSON in SQLite,
de-duplicated, numbered per job, followable.

Workers number each run's lines (seq per lease) and spool them until acknowledged, so
after a reconnect or a server restart they re-send from the last acknowledged line.
`runs` keeps, per (job, task, attempt, rank), the ranges of worker numbers already stored,
which turns those re-sends into no-ops, and each line that is new gets the job's next
display sequence number: one gap-free order over all tasks and attempts, which
`rbs job logs -f` resumes from.

Storage (docs/design/listing-and-logs.md): a job's lines are grouped into chunks of
consecutive display numbers (`chunks`, rbs.server.log_chunks for the format), each at most
CHUNK_RAW bytes or CHUNK_LINES lines before compression. A batch from a worker is one
transaction. Its lines join the job's open chunk (the last, while it has room) as a row
of their own, compressed alone, so a small batch costs the compression of itself, not of
the chunk it joins; the open chunk's rows are merged into one row when it is full, when
they pass MAX_OPEN_ROWS, and when the job ends (`seal`). Lines past the room fill new
chunks. Any row is a valid chunk of the format: a reader never sees the difference. A
read walks the chunks from the one holding `after + 1`, and
`tail=N` walks them backwards until it has N lines, so both cost the lines they return
plus at most a chunk. A data dir whose `job_logs.db` still has the row-per-line table of
older versions (`lines`) is migrated on open, in one transaction.

`rbs.server.log_intake` feeds it the workers' batches, each acknowledged once stored.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple, TypeVar

from rbs.model import LogLine, LogStream
from rbs.scheduler.instructions import Note
from rbs.server import log_chunks as lc
from rbs.server.job_waits import JobWaits
from rbs.server.log_chunks import CHUNK_LINES, CHUNK_RAW
from rbs.server.log_migrate import migrate_rows
from rbs.server.telemetry import TelemetryStore, split

log = logging.getLogger(__name__)

_CACHED = 4096  # jobs (and runs) whose numbering is kept in memory
_TAILS = 256  # jobs whose open chunk's raw bytes are kept (at most CHUNK_RAW each: 32 MiB)
# An open chunk's rows, one per batch, are merged into one when there are more than this.
MAX_OPEN_ROWS = 64
# The server's own lines of a run (the scheduler's notes) are numbered from here on, apart
# from the worker's, so neither side's lines are ever taken for a re-sent one of the other.
NOTE_SEQ_BASE = 1 << 30

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    job_id INTEGER NOT NULL,
    kind INTEGER NOT NULL,       -- log_chunks.LOG_KIND (0): log lines; 1: telemetry (reserved)
    first_seq INTEGER NOT NULL,  -- the display number of the chunk's first line
    count INTEGER NOT NULL,      -- its lines: first_seq .. first_seq + count - 1
    raw_size INTEGER NOT NULL,   -- bytes before compression
    data BLOB NOT NULL           -- zstd of the segments (log_chunks)
);
CREATE UNIQUE INDEX IF NOT EXISTS chunks_seq ON chunks (job_id, kind, first_seq);
CREATE TABLE IF NOT EXISTS runs (
    job_id INTEGER NOT NULL,
    task INTEGER NOT NULL,       -- -1 when the job is not an array
    attempt INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    stored TEXT NOT NULL,        -- JSON [[lo, hi], ...]: the worker's line numbers stored
    PRIMARY KEY (job_id, task, attempt, rank)
) WITHOUT ROWID;
"""

# Lines of one segment: their display numbers, the bytes of each one's NDJSON, the NDJSON.
_Block = tuple[Sequence[int], Sequence[int], bytes]
RunKey = tuple[int, int, int]  # task (-1: not an array), attempt, rank
Ranges = list[list[int]]  # sorted, disjoint, inclusive [lo, hi] of worker line numbers
K = TypeVar("K")
V = TypeVar("V")


class _Open(NamedTuple):
    """A job's open chunk: lines first .. first + n - 1, stored as `rows` rows (the
    job's last), `raw` their segments end to end, the first row's `base` bytes of it."""

    first: int
    n: int
    raw: bytes
    rows: int
    base: int

    @property
    def full(self) -> bool:
        return self.n >= CHUNK_LINES or len(self.raw) >= CHUNK_RAW


def _rollback(db: sqlite3.Connection) -> None:
    """End a failed write's transaction; SQLite may have rolled it back already (it does
    when the disk is full)."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def _remember(cache: dict[K, V], key: K, value: V, size: int = _CACHED) -> None:
    """Keep `value` under `key`, forgetting the oldest entry past `size`."""
    cache.pop(key, None)
    cache[key] = value
    if len(cache) > size:
        del cache[next(iter(cache))]


def _covered(ranges: Ranges, n: int) -> bool:
    i = bisect.bisect_right(ranges, [n, float("inf")]) - 1
    return i >= 0 and ranges[i][0] <= n <= ranges[i][1]


def _merged(ranges: Ranges, numbers: Iterable[int]) -> Ranges:
    """`ranges` with `numbers` added, as sorted disjoint ranges (adjacent ones joined)."""
    spans = sorted([*([a, b] for a, b in ranges), *([n, n] for n in numbers)])
    out: Ranges = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


class JobLogs:
    """The log store plus in-memory wake-ups for followers."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # A line is acknowledged to the worker (which then drops it) only after commit;
        # NORMAL keeps the commit durable against a process crash, which is what the
        # worker's spool protects against; a power loss may lose the newest lines.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        migrate_rows(self._db)
        self.telemetry = TelemetryStore(self._db)  # samples: kind 1 (rbs.server.telemetry)
        self._next: dict[int, int] = {}  # job -> its next display number
        self._open: dict[int, _Open] = {}  # job -> its open chunk (the last, not full)
        self._runs: dict[tuple[int, RunKey], Ranges] = {}
        self._waits = JobWaits()  # followers: woken by new lines and state changes
        self._state_waits = JobWaits()  # woken by state changes only (jobs API: wait)

    def close(self) -> None:
        self._db.close()

    # ---- writing

    def _last_row(self, job_id: int) -> tuple[int, int] | None:
        """(first seq, count) of the job's last chunk row, None when it has none."""
        row = self._db.execute(
            "SELECT first_seq, count FROM chunks WHERE job_id = ? AND kind = ? "
            "ORDER BY first_seq DESC LIMIT 1",
            (job_id, lc.LOG_KIND),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    def _stored(self, job_id: int, key: RunKey) -> Ranges:
        ranges = self._runs.get((job_id, key))
        if ranges is None:
            row = self._db.execute(
                "SELECT stored FROM runs WHERE job_id = ? AND task = ? AND attempt = ? AND rank = ?",
                (job_id, *key),
            ).fetchone()
            ranges = [] if row is None else json.loads(row[0])
        return ranges

    def _new_lines(
        self, job_id: int, lines: list[LogLine]
    ) -> tuple[list[LogLine], dict[RunKey, Ranges]]:
        """The lines not stored yet (in the batch's order), and each run's ranges after."""
        if not lines:
            return [], {}
        groups: dict[RunKey, list[int]] = {}
        first = lines[0]
        one = (first.task, first.attempt, first.rank)
        if all((ln.task, ln.attempt, ln.rank) == one for ln in lines):  # a worker's batch
            groups[(-1 if first.task is None else first.task, first.attempt, first.rank)] = [
                ln.seq for ln in lines
            ]
        else:
            for ln in lines:
                key = (-1 if ln.task is None else ln.task, ln.attempt, ln.rank)
                groups.setdefault(key, []).append(ln.seq)
        ranges = {}
        seen: set[tuple[RunKey, int]] | None = None
        for key, numbers in groups.items():
            stored = self._stored(job_id, key)
            high = stored[-1][1] if stored else 0
            lo, hi = numbers[0], numbers[-1]
            if lo > high and numbers == list(range(lo, hi + 1)):  # the next lines, in order
                joins = bool(stored) and lo == high + 1
                ranges[key] = [*stored[:-1], [stored[-1][0], hi]] if joins else [*stored, [lo, hi]]
                continue
            if min(numbers) > high and len(set(numbers)) == len(numbers):
                ranges[key] = _merged(stored, numbers)
                continue
            seen = set() if seen is None else seen  # re-sent lines: the slow path
            fresh = []
            for n in numbers:
                if not _covered(stored, n) and (key, n) not in seen:
                    seen.add((key, n))
                    fresh.append(n)
            ranges[key] = _merged(stored, fresh)
        if seen is None:
            return lines, ranges
        new = []
        for ln in lines:
            mark = ((-1 if ln.task is None else ln.task, ln.attempt, ln.rank), ln.seq)
            if mark in seen:
                seen.discard(mark)
                new.append(ln)
        return new, ranges

    def append(self, job_id: int, lines: Iterable[LogLine]) -> int:
        """Store new lines, each numbered by its run's worker (re-sent ones are ignored),
        in one transaction; returns how many were new."""
        new, ranges = self._new_lines(job_id, list(lines))
        if not new:
            return 0
        new, samples = split(new)  # telemetry samples take no display number
        db = self._db
        seq = self._next.get(job_id)
        if seq is None:
            last = self._last_row(job_id)
            seq = 1 if last is None else last[0] + last[1]
        opened = self._open.get(job_id)
        db.execute("BEGIN")
        try:
            if new:
                opened = self._write_chunks(job_id, seq, new, opened)
            self.telemetry.write(job_id, samples)
            db.executemany(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?)",
                [(job_id, *key, json.dumps(r, separators=(",", ":"))) for key, r in ranges.items()],
            )
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            self._next.pop(job_id, None)
            self._open.pop(job_id, None)
            raise
        _remember(self._next, job_id, seq + len(new))
        if opened is not None:
            _remember(self._open, job_id, opened, _TAILS)
        else:
            self._open.pop(job_id, None)
        for key, r in ranges.items():
            _remember(self._runs, (job_id, key), r)
        self.wake(job_id)
        return len(new)

    def _write_chunks(
        self, job_id: int, seq: int, lines: list[LogLine], opened: _Open | None
    ) -> _Open | None:
        """Write `lines` (numbered from `seq`): the first piece joins the open chunk while
        it has room, as a row of its own; then full chunks, and a last piece that opens
        the next. Returns the open chunk after (None: the last one written is full)."""
        room_lines, room_raw = CHUNK_LINES, CHUNK_RAW
        if opened is not None:
            room_lines, room_raw = CHUNK_LINES - opened.n, CHUNK_RAW - len(opened.raw)
        joining = opened
        opened = None
        parts = list(lc.pieces(lines, room_lines, room_raw))
        for i, piece in enumerate(parts):
            raw = lc.encode_segments(piece, seq)
            if i == 0 and joining is not None:  # the others were sized as whole chunks
                grown = _Open(
                    joining.first,
                    joining.n + len(piece),
                    joining.raw + raw,
                    joining.rows + 1,
                    joining.base,
                )
                if len(parts) > 1:  # it took all the room there was: done
                    self._merge(job_id, grown)
                elif grown.full or grown.rows > MAX_OPEN_ROWS:
                    opened = self._merge(job_id, grown)
                else:
                    self._insert(job_id, seq, len(piece), raw)
                    opened = grown
            else:
                self._insert(job_id, seq, len(piece), raw)
                fresh = _Open(seq, len(piece), raw, 1, len(raw))
                opened = None if fresh.full else fresh
            seq += len(piece)
        return opened

    def _insert(self, job_id: int, first: int, count: int, raw: bytes) -> None:
        self._db.execute(
            "INSERT INTO chunks VALUES (?,?,?,?,?,?)",
            (job_id, lc.LOG_KIND, first, count, len(raw), lc.compress(raw)),
        )

    def _merge(self, job_id: int, opened: _Open) -> _Open | None:
        """The open chunk's rows (the job's last ones) as one row; the open chunk after
        (None once it is full)."""
        self._db.execute(
            "DELETE FROM chunks WHERE job_id = ? AND kind = ? AND first_seq >= ?",
            (job_id, lc.LOG_KIND, opened.first),
        )
        self._insert(job_id, opened.first, opened.n, opened.raw)
        if opened.full:
            return None
        return _Open(opened.first, opened.n, opened.raw, 1, len(opened.raw))

    def seal(self, job_id: int) -> None:
        """Merge the job's open chunk into one row (its job ended: no more lines are
        expected, so its rows stop growing as separate small ones). One transaction."""
        opened = self._open.get(job_id)
        if opened is None or opened.rows == 1:
            return
        db = self._db
        db.execute("BEGIN")
        try:
            after = self._merge(job_id, opened)
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            self._open.pop(job_id, None)
            raise
        if after is None:
            self._open.pop(job_id, None)
        else:
            self._open[job_id] = after

    # ---- reading

    def _chunks(
        self, job_id: int, after: int, newest_first: bool = False
    ) -> Iterator[tuple[int, bytes]]:
        """(first seq, raw) of each chunk holding a line after `after`, in seq order (or
        newest first)."""
        row = self._db.execute(
            "SELECT max(first_seq) FROM chunks WHERE job_id = ? AND kind = ? AND first_seq <= ?",
            (job_id, lc.LOG_KIND, after + 1),
        ).fetchone()
        start = row[0] if row[0] is not None else 0
        order = "DESC" if newest_first else "ASC"
        cur = self._db.execute(
            "SELECT first_seq, data FROM chunks WHERE job_id = ? AND kind = ? AND first_seq >= ? "
            f"ORDER BY first_seq {order}",
            (job_id, lc.LOG_KIND, start),
        )
        opened = self._open.get(job_id)
        for first, data in cur:
            if opened is not None and opened.first == first:  # its first row, from memory
                yield first, opened.raw[: opened.base]
            else:
                yield first, lc.decompress(data)

    def _blocks(
        self, job_id: int, after: int, task: int | None, tail: int | None, limit: int
    ) -> list[_Block]:
        """The lines asked for as blocks (one per segment, in display order): `limit`
        lines at most, or the last `tail`."""
        want = tail if tail is not None else limit
        blocks: list[_Block] = []
        got = 0
        if want <= 0:
            return []
        for first, raw in self._chunks(job_id, after, newest_first=tail is not None):
            picked = []
            seq = first
            for seg in lc.segments(raw):
                block = _pick(seq, seg, after, task)
                seq += len(seg)
                if block[0]:
                    picked.append(block)
            if tail is not None:
                blocks[:0] = picked
            else:
                blocks += picked
            got += sum(len(p[0]) for p in picked)
            if got >= want:
                break
        extra = got - want
        while extra > 0:  # trim the far end: the oldest lines for a tail, else the newest
            i = 0 if tail is not None else -1
            size = len(blocks[i][0])
            if size <= extra:
                del blocks[i]
                extra -= size
                continue
            seqs, sizes, data = blocks[i]
            if tail is not None:
                cut = sum(sizes[:extra])
                blocks[i] = (seqs[extra:], sizes[extra:], data[cut:])
            else:
                cut = sum(sizes[: size - extra])
                blocks[i] = (seqs[: size - extra], sizes[: size - extra], data[:cut])
            extra = 0
        return blocks

    def read(
        self,
        job_id: int,
        *,
        after: int = 0,
        task: int | None = None,
        tail: int | None = None,
        limit: int = 5000,
    ) -> list[LogLine]:
        """Lines in the job's display order: `seq` is the job's number, not the worker's."""
        return [
            line
            for _, _, data in self._blocks(job_id, after, task, tail, limit)
            for line in lc.segment_lines(data)
        ]

    def read_payload(
        self,
        job_id: int,
        *,
        after: int = 0,
        task: int | None = None,
        tail: int | None = None,
        limit: int = 20_000,
    ) -> tuple[bytes, int | None]:
        """`read`'s lines as the API's NDJSON, sliced from the chunks as they were rendered
        when stored, and the display number of the last (None when there is none)."""
        blocks = self._blocks(job_id, after, task, tail, limit)
        if not blocks:
            return b"", None
        return b"".join(b[2] for b in blocks), blocks[-1][0][-1]

    def note_all(self, instructions: Iterable[object], now: float) -> None:
        """Store the scheduler's `Note`s as `sys` lines of the attempt each is about.

        Written after the step's journal commit; a note that cannot be stored (a full
        disk) is logged and dropped, never holding up the scheduler."""
        for ins in instructions:
            if not isinstance(ins, Note):
                continue
            key = (-1 if ins.index is None else ins.index, ins.attempt, 0)
            high = max((hi for _, hi in self._stored(ins.job_id, key)), default=0)
            line = LogLine(
                seq=max(high, NOTE_SEQ_BASE) + 1,
                time=now,
                stream=LogStream.SYS,
                text=ins.text,
                task=ins.index,
                attempt=ins.attempt,
            )
            try:
                self.append(ins.job_id, [line])
            except (sqlite3.Error, OSError) as e:
                log.warning("job %d: note not stored (%s): %s", ins.job_id, e, ins.text)

    def wake(self, job_id: int) -> None:
        self._waits.wake(job_id)

    async def wait(self, job_id: int, timeout: float) -> None:
        """Return when the job has new lines or changed state, or after `timeout`."""
        await self._waits.wait(job_id, timeout)

    def state_changed(self, job_id: int, terminal: bool) -> None:
        """The driver's word that the job's state changed: its followers and state waiters
        wake; an ended job's open chunk is sealed (a failure to is only logged)."""
        self._waits.wake(job_id)
        self._state_waits.wake(job_id)
        if terminal:
            try:
                self.seal(job_id)
            except sqlite3.Error as e:
                log.warning("job %d: its log's last lines stay in rows of their own: %s", job_id, e)

    async def wait_state(self, job_id: int, timeout: float) -> None:
        """Return when the job's state changes (not at new lines), or after `timeout`."""
        await self._state_waits.wait(job_id, timeout)


def _pick(first: int, seg: lc.Segment, after: int, task: int | None) -> _Block:
    """A segment's lines after `after` (of `task` only, when given)."""
    n = len(seg)
    lo = max(0, after + 1 - first)
    if task is None:
        if lo == 0:  # the whole segment, the common case: one slice, nothing per line
            return range(first, first + n), seg.sizes, seg.ndjson
        return range(first + lo, first + n), seg.sizes[lo:], seg.ndjson[sum(seg.sizes[:lo]) :]
    keep = {i for i, r in enumerate(seg.runs) if r[0] == task}
    ends = list(accumulate(seg.sizes))
    idx = [i for i in range(lo, n) if seg.run_of[i] in keep]
    data = b"".join(seg.ndjson[ends[i] - seg.sizes[i] : ends[i]] for i in idx)
    return [first + i for i in idx], [seg.sizes[i] for i in idx], data
