"""Moves an older `job_logs.db` into the current chunk format (`FORMAT`).

Versions before the chunk store kept one row per line: (job_id, task, attempt, rank,
wseq, seq, time, stream, text). On open, `migrate_rows` turns them into chunks (each
job's lines in display order, a new chunk wherever the numbers jump) and the per-run
ranges of worker numbers, drops the table and records the format, in one transaction:
an interrupted migration leaves the old table as it was, and the next open tries again.

Format chunks-1 stored a segment as columns (times and texts apart, in their JSON forms)
and rendered the NDJSON at every read; chunks-2 (rbs.server.log_chunks) stores the
rendered NDJSON. A chunks-1 store is re-encoded chunk by chunk, in one transaction too.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import struct
from array import array
from collections.abc import Iterator
from itertools import accumulate

from rbs.model import LogLine, LogStream
from rbs.server import log_chunks as lc

log = logging.getLogger(__name__)

FORMAT = "chunks-2"
_V1_HEAD = struct.Struct("<IHII")
_V1_RUN = struct.Struct("<iii")


def _ranges(numbers: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def _runs_of_job(rows: list[tuple[int, int, int, int]]) -> dict[tuple[int, int, int], list[int]]:
    runs: dict[tuple[int, int, int], list[int]] = {}
    for task, attempt, rank, wseq in rows:
        runs.setdefault((task, attempt, rank), []).append(wseq)
    return runs


def _jobs(db: sqlite3.Connection) -> Iterator[tuple[int, list[tuple[object, ...]]]]:
    cur = db.execute(
        "SELECT job_id, task, attempt, rank, wseq, seq, time, stream, text FROM lines "
        "ORDER BY job_id, seq"
    )
    job: int | None = None
    rows: list[tuple[object, ...]] = []
    for row in cur:
        if row[0] != job and rows:
            assert job is not None
            yield job, rows
            rows = []
        job = row[0]
        rows.append(row)
    if rows and job is not None:
        yield job, rows


def _write_job(db: sqlite3.Connection, job_id: int, rows: list[tuple[object, ...]]) -> int:
    """One job's old rows as chunks (split where the display numbers jump) and runs."""
    chunks = 0
    run: list[LogLine] = []

    def flush() -> None:
        nonlocal chunks
        seq = run[0].seq
        for piece in lc.pieces(run, lc.CHUNK_LINES, lc.CHUNK_RAW):
            raw = lc.encode_segments(piece, seq)
            db.execute(
                "INSERT INTO chunks VALUES (?,?,?,?,?,?)",
                (job_id, lc.LOG_KIND, seq, len(piece), len(raw), lc.compress(raw)),
            )
            seq += len(piece)
            chunks += 1
        run.clear()

    for _, task, attempt, rank, _, seq, time, stream, text in rows:
        assert isinstance(seq, int) and isinstance(task, int)
        if run and seq != run[-1].seq + 1:
            flush()
        run.append(
            LogLine(
                seq=seq,
                time=float(time),  # type: ignore[arg-type]
                stream=LogStream(str(stream)),
                text=str(text),
                task=None if task < 0 else task,
                attempt=int(attempt),  # type: ignore[call-overload]
                rank=int(rank),  # type: ignore[call-overload]
            )
        )
    if run:
        flush()
    keys = _runs_of_job([(r[1], r[2], r[3], r[4]) for r in rows])  # type: ignore[misc]
    db.executemany(
        "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?)",
        [(job_id, *k, json.dumps(_ranges(v), separators=(",", ":"))) for k, v in keys.items()],
    )
    return chunks


def _v1_lines(raw: bytes, seq: int) -> Iterator[LogLine]:
    """The lines of chunks-1 segments (columns), numbered from `seq`."""
    o = 0
    while o < len(raw):
        n, r, text_size, time_size = _V1_HEAD.unpack_from(raw, o)
        o += _V1_HEAD.size
        runs = []
        for _ in range(r):
            runs.append(_V1_RUN.unpack_from(raw, o))
            o += _V1_RUN.size
        streams, run_of = raw[o : o + n], raw[o + n : o + 2 * n]
        o += 2 * n
        text_ends = list(accumulate(array("I", raw[o : o + 4 * n])))  # little-endian hosts
        o += 4 * n
        time_ends = list(accumulate(raw[o : o + n]))
        o += n
        times = raw[o : o + time_size].decode("ascii")
        o += time_size
        texts = raw[o : o + text_size].decode("utf-8", "surrogatepass")
        o += text_size
        for i in range(n):
            task, attempt, rank = runs[run_of[i]]
            yield LogLine(
                seq=seq,
                time=float(times[time_ends[i - 1] if i else 0 : time_ends[i]]),
                stream=LogStream(lc.STREAM_NAMES[streams[i]]),
                text=json.loads(texts[text_ends[i - 1] if i else 0 : text_ends[i]]),
                task=None if task < 0 else task,
                attempt=attempt,
                rank=rank,
            )
            seq += 1


def _reencode(db: sqlite3.Connection) -> None:
    """Re-encode every log chunk of a chunks-1 store in the current format."""
    db.execute("BEGIN IMMEDIATE")
    try:
        rows = db.execute(
            "SELECT job_id, first_seq, data FROM chunks WHERE kind = ?", (lc.LOG_KIND,)
        ).fetchall()
        for job_id, first, data in rows:
            raw = lc.encode_segments(list(_v1_lines(lc.decompress(data), first)), first)
            db.execute(
                "UPDATE chunks SET raw_size = ?, data = ? "
                "WHERE job_id = ? AND kind = ? AND first_seq = ?",
                (len(raw), lc.compress(raw), job_id, lc.LOG_KIND, first),
            )
        db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (FORMAT,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    log.info("job logs: re-encoded %d chunks as %s", len(rows), FORMAT)


def migrate_rows(db: sqlite3.Connection) -> None:
    """Move the old `lines` table, if there is one, into chunks and runs, and older
    chunks into the current format."""
    old = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lines'")
    if old.fetchone() is None:
        db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
        if db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0] != FORMAT:
            _reencode(db)
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        jobs = lines = chunks = 0
        for job_id, rows in _jobs(db):
            chunks += _write_job(db, job_id, rows)
            jobs += 1
            lines += len(rows)
        db.execute("DROP TABLE lines")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (FORMAT,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    log.info("job logs: moved %d lines of %d jobs into %d chunks", lines, jobs, chunks)
