"""`rbs job list`'s table: plain columns sized from one page, one formatted line per row.

No layout engine: the widths are the longest cell of each column on the page, and each
row is one `str.ljust` join, so printing costs microseconds per row (a rich Table cost
about 2 ms per row). Long names and reasons are cut to `MAX_CELL` characters with `~`.

On a terminal the table fits its width (80 columns and up): the free-text columns are
cut further (never below `MIN_CUT`), then the least needed columns are left out, in
`DROP_ORDER`. The id and the state are never cut or left out.
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
MIN_CUT = 8
CUTTABLE = ("NAME", "REASON", "USER", "WORKER")
DROP_ORDER = ("SUBMITTED", "GPU", "MEM", "CPU", "PRIO", "WORKER", "USER", "REASON", "QUEUE", "NAME")


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


def terminal_width() -> int | None:
    """stdout's width when it is a terminal; None for a pipe or a file (no limit)."""
    import os
    import sys

    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else None
    except (OSError, ValueError):
        return None


def table_lines(jobs: Sequence[JobInfo], width: int | None = -1) -> list[str]:
    """The header and one line per job, columns as wide as this page needs, within
    `width` characters (default: the terminal's; None: no limit)."""
    if width == -1:
        width = terminal_width()
    rows = [COLUMNS, *(row_of(j) for j in jobs)]
    widths = {c: max(len(row[i]) for row in rows) for i, c in enumerate(COLUMNS)}
    shown = list(COLUMNS)
    if width is not None:
        _fit(widths, shown, width)
    index = [COLUMNS.index(c) for c in shown]
    return ["  ".join(_cell(row[i], widths[COLUMNS[i]]) for i in index).rstrip() for row in rows]


def _fit(widths: dict[str, int], shown: list[str], width: int) -> None:
    """Narrow the cuttable columns, then leave columns out, until a line fits `width`."""

    def total() -> int:
        return sum(widths[c] for c in shown) + 2 * (len(shown) - 1)

    while total() > width:
        wide = [c for c in CUTTABLE if c in shown and widths[c] > MIN_CUT]
        if not wide:
            break
        c = max(wide, key=lambda c: widths[c])
        widths[c] = max(MIN_CUT, widths[c] - (total() - width))
    for c in DROP_ORDER:
        if total() <= width:
            break
        shown.remove(c)


def _cell(text: str, w: int) -> str:
    return text.ljust(w) if len(text) <= w else text[: w - 1] + "~"


def footer(shown: int, total: int) -> str | None:
    """The line under a listing cut short: how many of how many, and how to see the rest."""
    if shown >= total:
        return None
    return f"{shown:,} of {total:,} jobs; --all to see every one"


def print_lines(lines: Iterable[str]) -> None:
    import sys

    sys.stdout.write("".join(line + "\n" for line in lines))
