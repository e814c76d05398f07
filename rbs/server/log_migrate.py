"""Moves an older `job_logs.db` (a row per line, table `lines`) into the chunk store.

Versions before the chunk store kept one row per line: (job_id, task, attempt, rank,
wseq, seq, time, stream, text). On open, `migrate_rows` turns them into chunks (each
job's lines in display order, a new chunk wherever the numbers jump) and the per-run
ranges of worker numbers, drops the table and records the format, in one transaction:
an interrupted migration leaves the old table as it was, and the next open tries again.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator

from rbs.model import LogLine, LogStream
from rbs.server import log_chunks as lc

log = logging.getLogger(__name__)

FORMAT = "chunks-1"


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
            raw = lc.encode_segments(piece)
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


def migrate_rows(db: sqlite3.Connection) -> None:
    """Move the old `lines` table, if there is one, into chunks and runs."""
    old = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lines'")
    if old.fetchone() is None:
        db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
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
