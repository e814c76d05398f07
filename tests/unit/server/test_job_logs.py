"""The chunk log store: every line once, in order, compact, and older data dirs migrated."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sqlite3
import struct
from pathlib import Path

import pytest

from rbs.model import LogLine, LogStream
from rbs.server import log_chunks
from rbs.server.job_logs import JobLogs
from rbs.wire.jobs_api import log_lines_payload


def lines(
    first: int, n: int, *, task: int | None = None, attempt: int = 1, text: str = "line {}"
) -> list[LogLine]:
    streams = (LogStream.OUT, LogStream.ERR, LogStream.SYS)
    return [
        LogLine(
            seq=w,
            time=1700000000.0 + w / 7,
            stream=streams[w % 3],
            text=text.format(w),
            task=task,
            attempt=attempt,
            rank=0,
        )
        for w in range(first, first + n)
    ]


def _same(got: list[LogLine], sent: list[LogLine], first_seq: int = 1) -> None:
    """`got` are `sent`, numbered by the job from `first_seq` on."""
    assert [x.seq for x in got] == list(range(first_seq, first_seq + len(sent)))
    strip = [(x.time, x.stream, x.text, x.task, x.attempt, x.rank) for x in got]
    assert strip == [(x.time, x.stream, x.text, x.task, x.attempt, x.rank) for x in sent]


def _numbered(ls: list[LogLine], first_seq: int = 1) -> list[LogLine]:
    return [dataclasses.replace(x, seq=first_seq + i) for i, x in enumerate(ls)]


@pytest.fixture
def logs(tmp_path: Path) -> JobLogs:
    store = JobLogs(tmp_path / "job_logs.db")
    yield store
    store.close()


def test_lines_come_back_in_order_with_every_field(logs: JobLogs) -> None:
    odd = ["", "naïve ☃ 𝄞", 'quote " back \\ tab \t', "\x00\x1b[31m"]
    sent = lines(1, 5, text="{}") + [
        LogLine(seq=10 + i, time=5.5, stream=LogStream.OUT, text=t, task=None, attempt=2, rank=1)
        for i, t in enumerate(odd)
    ]
    assert logs.append(7, sent) == len(sent)
    got = logs.read(7, limit=100)
    _same(got, sent)
    payload, last = logs.read_payload(7)
    assert payload == log_lines_payload(got) and last == len(sent)
    assert logs.read(8) == [] and logs.read_payload(8) == (b"", None)
    assert logs.append(8, []) == 0


def test_resent_lines_are_stored_once_and_a_hole_is_filled(logs: JobLogs) -> None:
    assert logs.append(1, lines(1, 10)) == 10
    assert logs.append(1, lines(1, 10)) == 0  # a reconnect sends it all again
    assert logs.append(1, lines(5, 10)) == 4  # 11-14 are new
    assert logs.append(1, lines(20, 5)) == 5  # 15-19 are held back (a gap) ...
    assert logs.append(1, lines(15, 10)) == 5  # ... and come later: only they are new
    got = logs.read(1, limit=100)
    assert [x.text for x in got] == [
        f"line {w}" for w in [*range(1, 15), *range(20, 25), *range(15, 20)]
    ]
    assert [x.seq for x in got] == list(range(1, 25))
    # Another attempt's and another task's numbers are their own.
    assert logs.append(1, lines(1, 3, attempt=2)) == 3
    assert logs.append(1, lines(1, 3, task=4)) == 3
    assert len(logs.read(1, limit=100)) == 30


def test_numbering_and_deduplication_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "job_logs.db"
    first = JobLogs(path)
    first.append(3, lines(1, 50))
    first.close()
    again = JobLogs(path)
    assert again.append(3, lines(40, 20)) == 9
    got = again.read(3, limit=1000)
    assert [x.seq for x in got] == list(range(1, 60))
    _same(got, lines(1, 59))
    again.close()


def test_after_tail_and_task_select_the_same_lines_as_a_filter_would(logs: JobLogs) -> None:
    sent: list[LogLine] = []
    for k in range(40):  # many small batches of two tasks, interleaved, over many chunks
        batch = lines(1 + 300 * (k // 2), 300, task=k % 2, text="x{}" + "y" * 200)
        sent += batch
        logs.append(9, batch)
    everything = logs.read(9, limit=100_000)
    assert len(everything) == len(sent)
    chunks = logs._db.execute("SELECT count(*) FROM chunks WHERE job_id = 9").fetchone()[0]
    assert chunks > 10  # the reads below cross chunk boundaries
    for after in (0, 1, 299, 5000, 11_999, 12_000):
        assert logs.read(9, after=after, limit=100_000) == everything[after:]
        assert logs.read(9, after=after, limit=7) == everything[after : after + 7]
        for n in (1, 5, 1000):
            assert logs.read(9, after=after, tail=n) == everything[after:][-n:]
            of_task = [x for x in everything[after:] if x.task == 1]
            assert logs.read(9, after=after, tail=n, task=1) == of_task[-n:]
            for task in (None, 1):  # the served bytes: sliced from the stored NDJSON
                payload, last = logs.read_payload(9, after=after, tail=n, task=task)
                want = logs.read(9, after=after, tail=n, task=task)
                assert payload == log_lines_payload(want)
                assert last == (want[-1].seq if want else None)
        assert logs.read(9, after=after, task=0, limit=100_000) == [
            x for x in everything[after:] if x.task == 0
        ]


def test_a_short_line_takes_under_40_bytes(tmp_path: Path) -> None:
    logs = JobLogs(tmp_path / "job_logs.db")
    n = 50_000
    for start in range(1, n, 500):  # batches of 500, as a busy worker sends them
        logs.append(1, lines(start, 500, text="ok {:08d} 01234567"))
    logs.close()
    db = sqlite3.connect(tmp_path / "job_logs.db")
    (stored,) = db.execute("SELECT sum(length(data)) + 40 * count(*) FROM chunks").fetchone()
    assert len("ok 00000001 01234567") == 20
    assert stored / n <= 40


def test_an_old_row_per_line_store_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "job_logs.db"
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE lines (job_id INTEGER NOT NULL, task INTEGER NOT NULL,
            attempt INTEGER NOT NULL, rank INTEGER NOT NULL, wseq INTEGER NOT NULL,
            seq INTEGER NOT NULL, time REAL NOT NULL, stream TEXT NOT NULL, text TEXT NOT NULL,
            PRIMARY KEY (job_id, task, attempt, rank, wseq));
        CREATE UNIQUE INDEX lines_seq ON lines (job_id, seq);
        """
    )
    old = {1: lines(1, 30), 2: lines(1, 4, task=3)}
    for job_id, ls in old.items():
        db.executemany(
            "INSERT INTO lines VALUES (?,?,?,?,?,?,?,?,?)",
            [
                (
                    job_id,
                    -1 if x.task is None else x.task,
                    x.attempt,
                    x.rank,
                    x.seq,
                    x.seq,
                    x.time,
                    x.stream.value,
                    x.text,
                )
                for x in ls
            ],
        )
    db.commit()
    db.close()
    logs = JobLogs(path)
    for job_id, ls in old.items():
        _same(logs.read(job_id, limit=100), ls)
    assert logs.append(1, lines(25, 10)) == 4  # what was stored before still counts
    assert logs.read(1, limit=100)[-1].seq == 34
    tables = {r[0] for r in logs._db.execute("SELECT name FROM sqlite_master")}
    assert "lines" not in tables and {"chunks", "runs"} <= tables
    logs.close()


def test_the_chunk_format_round_trips_and_names_its_kinds() -> None:
    sent = lines(1, 3) + lines(1, 2, task=5, attempt=3, text="\udcff lone {}")
    raw = log_chunks.encode_segments(sent, 1)
    segs = list(log_chunks.segments(log_chunks.decompress(log_chunks.compress(raw))))
    got = [ln for seg in segs for ln in log_chunks.segment_lines(seg.ndjson)]
    _same(got, sent)
    # Stored as served: valid UTF-8 NDJSON (a lone surrogate as JSON's escape), one line
    # per stored line, byte for byte what the API's builder makes of the others.
    ndjson = b"".join(seg.ndjson for seg in segs)
    assert ndjson.decode("utf-8").count("\n") == len(sent)
    assert ndjson.startswith(log_lines_payload(_numbered(sent[:3])))
    assert b"\\udcff lone 2" in ndjson
    assert (log_chunks.LOG_KIND, log_chunks.TELEMETRY_KIND) == (0, 1)


def _v1_chunk(ls: list[LogLine]) -> bytes:
    """`ls` as one segment of the chunks-1 format (columns), for the migration test."""
    runs = list(dict.fromkeys((-1 if x.task is None else x.task, x.attempt, x.rank) for x in ls))
    texts = [json.encoder.encode_basestring(x.text) for x in ls]
    times = [repr(x.time) for x in ls]
    text_blob, time_blob = "".join(texts).encode(), "".join(times).encode()
    codes = {LogStream.OUT: 0, LogStream.ERR: 1, LogStream.SYS: 2}
    return b"".join(
        [
            struct.pack("<IHII", len(ls), len(runs), len(text_blob), len(time_blob)),
            *(struct.pack("<iii", *r) for r in runs),
            bytes(codes[x.stream] for x in ls),
            bytes(runs.index((-1 if x.task is None else x.task, x.attempt, x.rank)) for x in ls),
            struct.pack(f"<{len(ls)}I", *map(len, texts)),
            bytes(map(len, times)),
            time_blob,
            text_blob,
        ]
    )


def test_a_chunks_1_store_is_reencoded_on_open(tmp_path: Path) -> None:
    path = tmp_path / "job_logs.db"
    JobLogs(path).close()  # the tables, as any version made them
    db = sqlite3.connect(path)
    sent = lines(1, 6) + lines(7, 3, task=2, text="naïve {}")
    db.execute("UPDATE meta SET value = 'chunks-1' WHERE key = 'format'")
    for first, part in ((1, sent[:4]), (5, sent[4:])):
        raw = _v1_chunk(part)
        db.execute(
            "INSERT INTO chunks VALUES (?,?,?,?,?,?)",
            (3, 0, first, len(part), len(raw), log_chunks.compress(raw)),
        )
    db.commit()
    db.close()
    logs = JobLogs(path)
    got = logs.read(3, limit=100)
    _same(got, sent)
    assert logs.read_payload(3)[0] == log_lines_payload(got)
    assert logs.read(3, tail=2, task=2) == got[-2:]
    (fmt,) = logs._db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    assert fmt == "chunks-2"
    logs.close()


def _rows(db: sqlite3.Connection, job_id: int) -> list[tuple[int, int, int]]:
    """(first_seq, count, raw_size) of each of the job's log chunk rows, in order."""
    return db.execute(
        "SELECT first_seq, count, raw_size FROM chunks WHERE job_id = ? AND kind = 0 "
        "ORDER BY first_seq",
        (job_id,),
    ).fetchall()


def _covering(rows: list[tuple[int, int, int]], n: int) -> None:
    """The rows hold lines 1 .. n, each once, in order."""
    assert rows[0][0] == 1
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(rows))
    assert rows[-1][0] + rows[-1][1] - 1 == n


def test_small_batches_end_in_full_chunks_and_read_right_on_the_way(logs: JobLogs) -> None:
    # An array of short tasks: a few lines per task, one batch each, as a worker sends them.
    sent: list[LogLine] = []
    for task in range(400):
        batch = lines(1, 7, task=task, text="task line {} " + "z" * 100)
        sent += batch
        assert logs.append(5, batch) == 7
        if task % 37 == 0:  # a follower reads while the open chunk is in rows
            _same(logs.read(5, limit=100_000), sent)
            assert logs.read(5, after=len(sent) - 3) == logs.read(5, limit=100_000)[-3:]
            payload, last = logs.read_payload(5, tail=9)
            assert payload == log_lines_payload(logs.read(5, tail=9)) and last == len(sent)
    rows = _rows(logs._db, 5)
    _covering(rows, len(sent))
    full = [r for r in rows if r[2] >= log_chunks.CHUNK_RAW - 300]  # one line short at most
    assert len(full) >= len(sent) * 220 // log_chunks.CHUNK_RAW  # most lines: in full chunks
    assert len(rows) - len(full) <= 1 + 64  # the open chunk: a merged row and its batches
    logs.seal(5)  # the job ended
    sealed = _rows(logs._db, 5)
    _covering(sealed, len(sent))
    assert len(sealed) == len(full) + 1
    _same(logs.read(5, limit=100_000), sent)
    assert logs.append(5, lines(8, 2, task=399, text="late {}")) == 2  # after the end
    assert len(logs.read(5, limit=100_000)) == len(sent) + 2


def test_an_open_chunk_in_rows_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "job_logs.db"
    first = JobLogs(path)
    for task in range(5):
        first.append(4, lines(1, 3, task=task))
    first.close()  # a kill: the open chunk's rows stay as they are
    again = JobLogs(path)
    assert again.append(4, lines(1, 3, task=4)) == 0  # re-sent: stored already
    for task in range(5, 9):
        assert again.append(4, lines(1, 3, task=task)) == 3
    again.seal(4)
    got = again.read(4, limit=100)
    assert [x.seq for x in got] == list(range(1, 28))
    assert [(x.task, x.text) for x in got] == [
        (t, f"line {w}") for t in range(9) for w in (1, 2, 3)
    ]
    _covering(_rows(again._db, 4), 27)
    again.close()
