"""Telemetry samples in the log store: kept apart from log lines, bucketed, averaged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rbs.model import LogLine, LogStream
from rbs.server.job_logs import JobLogs
from rbs.server.telemetry import CHUNK_SAMPLES, bucket, query_doc, select
from rbs.wire.errors import InvalidRequest
from rbs.wire.logs import TELEMETRY_PREFIX


def sample_line(seq: int, rec: dict[str, Any], *, task: int | None = None) -> LogLine:
    return LogLine(
        seq=seq,
        time=rec["t"],
        stream=LogStream.SYS,
        text=TELEMETRY_PREFIX + json.dumps(rec),
        task=task,
        attempt=1,
        rank=0,
    )


def text_line(seq: int, text: str, stream: LogStream = LogStream.OUT) -> LogLine:
    return LogLine(seq=seq, time=100.0 + seq, stream=stream, text=text, attempt=1, rank=0)


def test_bucketing_averages_each_equal_time_bucket() -> None:
    # 10 samples 1 s apart into 2 buckets of 4.5 s: t 0-4 and t 5-9.
    samples = [
        {"t": float(i), "cpu": float(i), "mem": 100 * i, "mem_peak": 1000 + i, "cpu_s": i / 2}
        for i in range(10)
    ]
    first, second = bucket(samples, 2)
    assert first == {
        "t": 2.0,
        "cpu": 2.0,
        "mem": 200.0,
        "mem_peak": 1004,
        "cpu_s": 2.0,
        "samples": 5,
    }
    assert (second["t"], second["cpu"], second["mem"], second["samples"]) == (7.0, 7.0, 700.0, 5)
    assert second["mem_peak"] == 1009  # the bucket's highest, not an average
    assert bucket(samples, 10) == samples  # no more samples than points: as they are
    (one,) = bucket(samples, 1)
    assert one["cpu"] == 4.5 and one["samples"] == 10


def test_bucketing_leaves_out_empty_buckets_and_averages_gpus_per_id() -> None:
    samples = [
        {"t": 0.0, "gpus": [{"id": "0", "util": 10, "mem": 100}]},
        {"t": 1.0, "gpus": [{"id": "0", "util": 30, "mem": 300}]},
        {"t": 100.0, "gpus": [{"id": "0", "util": 90, "mem": 900}]},
    ]
    got = bucket(samples, 2)
    assert [b["gpus"] for b in got] == [
        [{"id": "0", "util": 20.0, "mem": 200.0}],
        [{"id": "0", "util": 90.0, "mem": 900.0}],
    ]


def test_each_run_is_bucketed_on_its_own_and_last_takes_each_runs_newest() -> None:
    a = [{"t": float(i), "cpu": 1.0, "task": 0} for i in range(4)]
    b = [{"t": float(i) + 0.5, "cpu": 3.0, "task": 1} for i in range(4)]
    got = select(a + b, points=1, task=None, last=False)
    assert [(s["task"], s["cpu"], s["samples"]) for s in got] == [(0, 1.0, 4), (1, 3.0, 4)]
    assert [s["t"] for s in select(a + b, points=9, task=None, last=True)] == [3.0, 3.5]
    assert select(a + b, points=9, task=1, last=False) == b


def test_samples_are_stored_apart_from_log_lines(tmp_path: Path) -> None:
    logs = JobLogs(tmp_path / "job_logs.db")
    batch = [
        text_line(1, "hello"),
        sample_line(2, {"t": 102.0, "cpu": 1.5, "mem": 10}),
        text_line(3, "sys", LogStream.SYS),
        sample_line(4, {"t": 104.0, "cpu": 0.5, "mem": 20}),
    ]
    assert logs.append(7, batch) == 2
    assert logs.append(7, batch) == 0  # re-sent: nothing new, no sample twice
    assert [(ln.seq, ln.text) for ln in logs.read(7)] == [(1, "hello"), (2, "sys")]
    got = logs.telemetry.read(7)
    assert [(s["t"], s["cpu"], s["task"], s["attempt"]) for s in got] == [
        (102.0, 1.5, None, 1),
        (104.0, 0.5, None, 1),
    ]
    assert logs.telemetry.read(7, since=103.0) == got[1:]
    # A batch of samples only, then more lines: the numbering goes on where it was.
    logs.append(7, [sample_line(5, {"t": 105.0})])
    logs.append(7, [text_line(6, "after")])
    assert [ln.seq for ln in logs.read(7)] == [1, 2, 3]
    logs.close()
    reopened = JobLogs(tmp_path / "job_logs.db")
    assert len(reopened.telemetry.read(7)) == 3
    assert [ln.text for ln in reopened.read(7)] == ["hello", "sys", "after"]


def test_many_samples_fill_several_chunks_in_order(tmp_path: Path) -> None:
    logs = JobLogs(tmp_path / "job_logs.db")
    n = CHUNK_SAMPLES * 2 + 5
    for i in range(n):
        logs.append(1, [sample_line(i + 1, {"t": float(i), "cpu": float(i)})])
    assert [s["t"] for s in logs.telemetry.read(1)] == [float(i) for i in range(n)]
    doc = query_doc(logs.telemetry, 1, None, {"points": "3"}, now=float(n))
    # t 0..516 in three buckets of 172 s: 0-171, 172-343, 344-516 (the last holds the end).
    assert [s["samples"] for s in doc["samples"]] == [172, 172, 173]
    assert [s["cpu"] for s in doc["samples"]] == [85.5, 257.5, 430.0]


def test_a_malformed_sample_is_dropped_not_stored_as_a_line(tmp_path: Path) -> None:
    logs = JobLogs(tmp_path / "job_logs.db")
    bad = LogLine(seq=1, time=1.0, stream=LogStream.SYS, text=TELEMETRY_PREFIX + "{", attempt=1)
    logs.append(1, [bad, text_line(2, "ok")])
    assert [ln.text for ln in logs.read(1)] == ["ok"]
    assert logs.telemetry.read(1) == []
    # A job's own output that looks like a sample is an ordinary line.
    out = LogLine(seq=3, time=1.0, stream=LogStream.OUT, text=TELEMETRY_PREFIX + '{"t":1}')
    logs.append(1, [out])
    assert logs.read(1)[-1].text == out.text and logs.telemetry.read(1) == []


@pytest.mark.parametrize(
    ("query", "message"),
    [({"points": "0"}, "points='0'"), ({"since": "x"}, "since='x': not a number")],
)
def test_a_bad_query_is_refused_naming_it(
    tmp_path: Path, query: dict[str, str], message: str
) -> None:
    logs = JobLogs(tmp_path / "job_logs.db")
    with pytest.raises(InvalidRequest, match=message):
        query_doc(logs.telemetry, 1, None, query, now=0.0)
