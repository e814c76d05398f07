"""Telemetry samples on the server: kept in the log store as `TELEMETRY_KIND` chunks.

Workers ship each sample as a SYS log line that starts with `TELEMETRY_PREFIX`
(rbs.executor.telemetry). `JobLogs.append` hands such lines here (`split`) before
numbering the rest: a sample takes no display number and never shows in `rbs job logs`,
but its worker line number is recorded like any other line's, so a re-sent sample is
dropped like a re-sent line. Samples go into the `chunks` table with kind 1: a chunk is
zstd of JSON lines (one sample each, with its run's task, attempt and rank), `first_seq`
numbers samples per job, and the last chunk takes new samples until it has
`CHUNK_SAMPLES`. They live and go with the job's log lines (same table, same retention).

`GET /v1/jobs/{id}/telemetry?since=SECONDS&points=N&last=1` reads them: the samples of
the last `since` seconds (all without it), and when a run has more than `points` of them
its range is cut into `points` equal time buckets, each one averaged (`bucket`);
`last=1` answers only the newest sample of each run.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rbs.model import LogLine, LogStream
from rbs.server import log_chunks as lc
from rbs.wire.errors import InvalidRequest
from rbs.wire.logs import TELEMETRY_PREFIX

CHUNK_SAMPLES = 256
DEFAULT_POINTS = 500
MAX_POINTS = 100_000
_RUN_FIELDS = ("task", "attempt", "rank")
_MAX_FIELDS = ("mem_peak", "cpu_s", "io_read", "io_write")  # cumulative: the bucket's last


def is_sample(line: LogLine) -> bool:
    return line.stream is LogStream.SYS and line.text.startswith(TELEMETRY_PREFIX)


def split(lines: Sequence[LogLine]) -> tuple[list[LogLine], list[dict[str, Any]]]:
    """The batch's log lines, and its samples as records (a malformed one is dropped)."""
    sys_, prefix = LogStream.SYS, TELEMETRY_PREFIX  # inlined: this runs for every line
    if not any(ln.stream is sys_ and ln.text.startswith(prefix) for ln in lines):
        return list(lines), []
    logs, samples = [], []
    for ln in lines:
        if not is_sample(ln):
            logs.append(ln)
            continue
        try:
            rec = json.loads(ln.text[len(TELEMETRY_PREFIX) :])
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("t"), int | float):
            rec.update(task=ln.task, attempt=ln.attempt, rank=ln.rank)
            samples.append(rec)
    return logs, samples


def _encode(samples: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(json.dumps(s, separators=(",", ":")).encode() + b"\n" for s in samples)


class TelemetryStore:
    """The kind-1 chunks of the log store's database (writes inside its transactions)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def write(self, job_id: int, samples: Sequence[Mapping[str, Any]]) -> None:
        """Add samples; the caller holds the transaction."""
        if not samples:
            return
        kind = lc.TELEMETRY_KIND
        row = self._db.execute(
            "SELECT first_seq, count, data FROM chunks WHERE job_id = ? AND kind = ? "
            "ORDER BY first_seq DESC LIMIT 1",
            (job_id, kind),
        ).fetchone()
        if row is not None and row[1] + len(samples) <= CHUNK_SAMPLES:
            raw = lc.decompress(row[2]) + _encode(samples)
            self._db.execute(
                "UPDATE chunks SET count = ?, raw_size = ?, data = ? "
                "WHERE job_id = ? AND kind = ? AND first_seq = ?",
                (row[1] + len(samples), len(raw), lc.compress(raw), job_id, kind, row[0]),
            )
            return
        first = 1 if row is None else row[0] + row[1]
        raw = _encode(samples)
        self._db.execute(
            "INSERT INTO chunks VALUES (?,?,?,?,?,?)",
            (job_id, kind, first, len(samples), len(raw), lc.compress(raw)),
        )

    def read(self, job_id: int, since: float | None = None) -> list[dict[str, Any]]:
        """The job's samples (at or after `since`, epoch seconds), oldest first."""
        out: list[dict[str, Any]] = []
        for (data,) in self._db.execute(
            "SELECT data FROM chunks WHERE job_id = ? AND kind = ? ORDER BY first_seq",
            (job_id, lc.TELEMETRY_KIND),
        ):
            for line in lc.decompress(data).splitlines():
                rec = json.loads(line)
                if since is None or rec["t"] >= since:
                    out.append(rec)
        out.sort(key=lambda s: s["t"])
        return out


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 3)


def _average(group: list[dict[str, Any]]) -> dict[str, Any]:
    """One bucket's samples as one: each number averaged, except cumulative counters and
    the memory peak, which take the bucket's highest; GPUs averaged per id."""
    out: dict[str, Any] = {k: group[0][k] for k in _RUN_FIELDS if k in group[0]}
    keys = {k for s in group for k in s} - {*_RUN_FIELDS, "gpus"}
    for key in sorted(keys):
        values = [s[key] for s in group if isinstance(s.get(key), int | float)]
        if values:
            out[key] = max(values) if key in _MAX_FIELDS else _mean(values)
    gpus: dict[str, dict[str, list[float]]] = {}
    for s in group:
        for g in s.get("gpus") or ():
            slot = gpus.setdefault(str(g.get("id")), {"util": [], "mem": []})
            for field in ("util", "mem"):
                if isinstance(g.get(field), int | float):
                    slot[field].append(g[field])
    if gpus:
        out["gpus"] = [
            {"id": gid, **{f: _mean(v) for f, v in fields.items() if v}}
            for gid, fields in gpus.items()
        ]
    out["samples"] = len(group)
    return out


def bucket(samples: Sequence[dict[str, Any]], points: int) -> list[dict[str, Any]]:
    """One run's samples (oldest first), at most `points` of them: past that, the range
    from the first to the last is cut into `points` equal time buckets, each averaged
    (an empty bucket gives nothing)."""
    if len(samples) <= points:
        return list(samples)
    t0, t1 = samples[0]["t"], samples[-1]["t"]
    width = (t1 - t0) / points or 1.0
    groups: dict[int, list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault(min(points - 1, int((s["t"] - t0) / width)), []).append(s)
    return [_average(groups[i]) for i in sorted(groups)]


def _run(s: Mapping[str, Any]) -> tuple[int, int, int]:
    task = s.get("task")
    return (-1 if task is None else int(task), int(s.get("attempt", 0)), int(s.get("rank", 0)))


def select(
    samples: Sequence[dict[str, Any]], *, points: int, task: int | None, last: bool
) -> list[dict[str, Any]]:
    """Per run (task, attempt, rank): its newest sample (`last`) or its bucketed range;
    all runs' together, oldest first."""
    runs: dict[tuple[int, int, int], list[dict[str, Any]]] = {}
    for s in samples:
        if task is None or s.get("task") == task:
            runs.setdefault(_run(s), []).append(s)
    out: list[dict[str, Any]] = []
    for key in sorted(runs):
        out.extend(runs[key][-1:] if last else bucket(runs[key], points))
    out.sort(key=lambda s: s["t"])
    return out


def _number(query: Mapping[str, str], name: str, low: float, high: float) -> float | None:
    text = query.get(name)
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InvalidRequest(f"{name}={text!r}: not a number") from None
    if not low <= value <= high:
        raise InvalidRequest(f"{name}={text!r}: must be from {low:g} to {high:g}")
    return value


def query_doc(
    store: TelemetryStore, job_id: int, task: int | None, query: Mapping[str, str], now: float
) -> dict[str, Any]:
    """The answer to GET /v1/jobs/{id}/telemetry: {"samples": [...]}."""
    since = _number(query, "since", 0, 10 * 365 * 86400)
    points = _number(query, "points", 1, MAX_POINTS)
    last = query.get("last", "") in ("1", "true")
    samples = store.read(job_id, None if since is None else now - since)
    n = DEFAULT_POINTS if points is None else int(points)
    return {"samples": select(samples, points=n, task=task, last=last)}
