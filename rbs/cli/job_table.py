"""`rbs job list`'s table: plain columns sized from one page, one formatted line per row.

No layout engine: the widths are the longest cell of each column on the page, and each
row is one `str.ljust` join, so printing costs microseconds per row (a rich Table cost
about 2 ms per row). Long names and reasons are cut to `MAX_CELL` characters with `~`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from rbs.wire.jobs_api import JobInfo

COLUMNS = (
    "ID",
    "NAME",
    "QUEUE",
    "STATE",
    "USER",
    "REASON",
    "PRIO",
    "CPU",
    "MEM",
    "GPU",
    "WORKER",
    "SUBMITTED",
)
MAX_CELL = 40


def _cut(text: str) -> str:
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "~"


def _when(ts: object) -> str:
    if not isinstance(ts, int | float) or not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def row_of(j: JobInfo) -> tuple[str, ...]:
    r = j.raw
    res = r.get("resources") or {}
    return (
        j.job_id,
        _cut(j.name),
        j.queue,
        j.state,
        _cut(str(r.get("user") or "unknown")),
        _cut(j.reason or ""),
        str((r.get("priority") or {}).get("total", "")),
        str(res.get("cpu", "")),
        str(res.get("memory", "")),
        str(res.get("gpus", "")),
        _cut(",".join(r.get("workers") or ())),
        _when(r.get("submit_time")),
    )


def table_lines(jobs: Sequence[JobInfo]) -> list[str]:
    """The header and one line per job, columns as wide as this page needs."""
    rows = [COLUMNS, *(row_of(j) for j in jobs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def footer(shown: int, total: int) -> str | None:
    """The line under a listing cut short: how many of how many, and how to see the rest."""
    if shown >= total:
        return None
    return f"{shown:,} of {total:,} jobs; --all to see every one"


def print_lines(lines: Iterable[str]) -> None:
    import sys

    sys.stdout.write("".join(line + "\n" for line in lines))
