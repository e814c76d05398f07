"""Line splitting and the numbered log spool: ordering, reopening, torn tails, read_from."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rbs.executor.joblog import LineSplitter, LogSpool, LogSpoolError, from_record, to_record
from rbs.model import LogLine, LogStream


def test_splitter_lines_partial_and_final() -> None:
    s = LineSplitter()
    assert s.feed(b"a\nb") == [("a", True)]
    assert s.feed(b"c\n\nd") == [("bc", True), ("", True)]
    assert s.finish() == [("d", False)]
    assert s.finish() == []


def test_splitter_splits_long_lines_without_dropping() -> None:
    s = LineSplitter(max_chars=4)
    out = s.feed(b"abcdefghij")
    assert out == [("abcd", False), ("efgh", False)]
    out += s.feed(b"k\nxy\n")
    assert out[2:] == [("ijk", True), ("xy", True)]
    long = LineSplitter(max_chars=3).feed(b"123456789\n")
    assert long == [("123", False), ("456", False), ("789", True)]


def test_splitter_decodes_utf8_across_chunks_and_replaces_garbage() -> None:
    s = LineSplitter()
    snow = "☃".encode()
    assert s.feed(snow[:1]) == []
    assert s.feed(snow[1:] + b"\n") == [("☃", True)]
    assert s.feed(b"\xff\xfebin\n") == [("\ufffd\ufffdbin", True)]
    assert s.feed(snow[:2]) == []
    assert s.finish() == [("\ufffd", False)]


@given(chunks=st.lists(st.binary(max_size=40), max_size=20), width=st.integers(1, 8))
def test_splitter_loses_nothing(chunks: list[bytes], width: int) -> None:
    s = LineSplitter(max_chars=width)
    out = [x for c in chunks for x in s.feed(c)] + s.finish()
    text = "".join(t + ("\n" if eol else "") for t, eol in out)
    assert text == b"".join(chunks).decode("utf-8", errors="replace")
    assert all(len(t) <= width for t, _ in out)


def test_spool_numbers_reopens_and_continues(tmp_path: Path) -> None:
    path = tmp_path / "job" / "log.jsonl"
    with LogSpool(path) as spool:
        lines = spool.append([(LogStream.OUT, "a", True), (LogStream.ERR, "b", False)], now=5.0)
        assert [(x.seq, x.stream, x.text, x.eol, x.time) for x in lines] == [
            (1, LogStream.OUT, "a", True, 5.0),
            (2, LogStream.ERR, "b", False, 5.0),
        ]
        spool.append([(LogStream.SYS, 'quote " and \n newline', True)])
    with LogSpool(path) as spool:
        assert spool.next_seq == 4
        spool.append([(LogStream.OUT, "d", True)])
        assert [x.seq for x in spool.read_from(1)] == [1, 2, 3, 4]
        assert spool.read_from(3)[0].text == 'quote " and \n newline'
        assert spool.read_from(5) == []


def test_spool_drops_a_torn_record_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    with LogSpool(path) as spool:
        spool.append([(LogStream.OUT, "whole", True)])
    with open(path, "ab") as f:
        f.write(b'{"seq":2,"t":1.0,"s":"out","te')
    with LogSpool(path) as spool:
        assert spool.next_seq == 2
        spool.append([(LogStream.OUT, "next", True)])
        assert [(x.seq, x.text) for x in spool.read_from(1)] == [(1, "whole"), (2, "next")]


def test_spool_torn_first_record_and_corrupt_tail(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"seq":1,"t"')
    with LogSpool(path) as spool:
        assert spool.next_seq == 1 and path.read_bytes() == b""
    path.write_bytes(b"not json\n")
    with pytest.raises(LogSpoolError, match="corrupt record at byte 0"):
        LogSpool(path)


def test_read_from_validates_and_limits(tmp_path: Path) -> None:
    with LogSpool(tmp_path / "log.jsonl") as spool:
        spool.append([(LogStream.OUT, str(i), True) for i in range(10)])
        assert [x.text for x in spool.read_from(4, limit=2)] == ["3", "4"]
        with pytest.raises(ValueError, match="start at 1"):
            spool.read_from(0)


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=400), pick=st.integers(1, 500))
def test_read_from_returns_exactly_the_tail(sizes: list[int], pick: int) -> None:
    # Big and small records make the byte bisection cross record boundaries everywhere.
    with tempfile.TemporaryDirectory() as tmp, LogSpool(Path(tmp) / "log.jsonl") as spool:
        for i, n in enumerate(sizes):
            spool.append([(LogStream.OUT, chr(97 + i % 26) * n, True)])
        got = spool.read_from(pick)
    assert [x.seq for x in got] == list(range(pick, len(sizes) + 1))
    assert all(len(x.text) == sizes[x.seq - 1] for x in got)


def test_logline_json_round_trip() -> None:
    line = LogLine(seq=7, time=1.5, stream=LogStream.SYS, text="ünï\x00", eol=False)
    assert from_record(to_record(line)) == line
    assert '"eol"' not in to_record(LogLine(seq=1, time=0, stream=LogStream.OUT, text=""))
