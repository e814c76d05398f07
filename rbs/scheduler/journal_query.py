"""Paged queries over the job journal (`jobs.db`): the filters, sorts and keysets of `GET /v1/jobs`.

A page is one query: the rows after the cursor's key, in the sort's order, `LIMIT n + 1`
(the extra row only says whether another page follows), and the total is one `COUNT`
over the same filter. Keyset paging, not OFFSET: page 1,000 costs what page 1 costs, and
a job submitted meanwhile shifts no row onto the next page twice.

What is indexed (see `LISTING_INDEXES`): the active jobs by id (a partial index, so the
default listing, active jobs in id order, never reads an ended row), state, queue, name,
and submit time. Sorting by id or submit time walks an index and stops after one page;
sorting by state or priority orders the matching rows in SQLite's sorter. Priority is
computed in SQL from the journal (the manifest's base, the queue's weight, the age bonus
from the eligible time), with the same arithmetic as rbs.scheduler.policy.

A `user` filter reads the job row's `user` (an expression index); rows journaled before
jobs had owners have none and belong to `unknown`, as rbs.scheduler.store reads them.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rbs.model import ACTIVE_STATES, UNKNOWN_USER, JobState
from rbs.scheduler.config import SchedulerConfig

# Run by Store on open (CREATE ... IF NOT EXISTS, so an older journal gains them too).
LISTING_INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_active ON jobs (id) WHERE state IN ('PENDING', 'RUNNING');
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs (queue);
CREATE INDEX IF NOT EXISTS jobs_name ON jobs (name);
CREATE INDEX IF NOT EXISTS jobs_submit ON jobs (submit_time);
CREATE INDEX IF NOT EXISTS jobs_user ON jobs (json_extract(body, '$.user'));
CREATE INDEX IF NOT EXISTS jobs_parent ON jobs (json_extract(body, '$.parent'))
    WHERE json_extract(body, '$.parent') IS NOT NULL;
"""

SORTS = ("id", "submit", "state", "priority")
# The order of `sort=state`: the enum's (queued, running, then the ways a job ends).
STATE_RANK = {s: i for i, s in enumerate(JobState)}
_ACTIVE_SQL = "state IN ('PENDING', 'RUNNING')"
_USER_SQL = "json_extract(body, '$.user')"
assert {JobState.PENDING, JobState.RUNNING} == ACTIVE_STATES  # the partial index's set


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFilter:
    """Which jobs a listing holds; every field given must match (AND)."""

    states: frozenset[JobState]  # never empty: the caller resolves "active" or "all"
    queue: str | None = None
    user: str | None = None
    name: str | None = None  # exact, or a glob when it has * ? or [
    array: bool | None = None  # True: only arrays, False: no arrays
    parent: int | None = None  # only the jobs that this job's runs submitted

    def __post_init__(self) -> None:
        if not self.states:
            raise ValueError("a job filter names at least one state")


@dataclass(frozen=True, slots=True, kw_only=True)
class PageKey:
    """Where a page starts: after the row with this sort value and job id."""

    value: int | float
    job_id: int


def _where(f: JobFilter) -> tuple[list[str], list[Any]]:
    terms: list[str] = []
    args: list[Any] = []
    if f.states == ACTIVE_STATES:
        terms.append(_ACTIVE_SQL)  # word for word the partial index's, so it is used
    elif f.states != frozenset(JobState):
        # Enum values only: safe to inline, and it lets the planner use jobs_state.
        terms.append(
            "state IN ("
            + ",".join(f"'{s.value}'" for s in sorted(f.states, key=STATE_RANK.__getitem__))
            + ")"
        )
    if f.queue is not None:
        terms.append("queue = ?")
        args.append(f.queue)
    if f.name is not None:
        terms.append("name GLOB ?" if any(c in f.name for c in "*?[") else "name = ?")
        args.append(f.name)
    if f.user is not None:
        # Word for word jobs_user's expression, so the index is used; a row written
        # before jobs had owners has no user, and is UNKNOWN_USER's.
        if f.user == UNKNOWN_USER:
            terms.append(f"({_USER_SQL} = ? OR {_USER_SQL} IS NULL)")
        else:
            terms.append(f"{_USER_SQL} = ?")
        args.append(f.user)
    if f.parent is not None:
        terms.append("json_extract(body, '$.parent') = ?")  # jobs_parent's expression
        args.append(f.parent)
    if f.array is not None:
        terms.append("json_extract(manifest, '$.array') IS " + ("NOT NULL" if f.array else "NULL"))
    return terms, args


def _sort_expr(sort: str, config: SchedulerConfig, now: float) -> tuple[str, list[Any]]:
    if sort == "id":
        return "id", []
    if sort == "submit":
        return "submit_time", []
    if sort == "state":
        whens = " ".join(f"WHEN '{s.value}' THEN {r}" for s, r in STATE_RANK.items())
        return f"(CASE state {whens} END)", []
    if sort == "priority":
        weights = " ".join("WHEN ? THEN ?" for _ in config.queues)
        args: list[Any] = [x for q in config.queues for x in (q.name, q.priority_weight)]
        queue = f"(CASE queue {weights} ELSE 0 END)" if config.queues else "0"
        # policy.age_bonus: whole age_intervals on a global grid, clamped to [0, age_max].
        # Times are positive, so CAST (truncation) is floor. An ended job's age stops at
        # its end time.
        now_step = math.floor(now / config.age_interval)
        age = (
            "(CASE WHEN json_extract(body, '$.eligible_time') IS NULL THEN 0 ELSE "
            "max(0, min(?, COALESCE(CAST(json_extract(body, '$.end_time') / ? AS INTEGER), ?)"
            " - CAST(json_extract(body, '$.eligible_time') / ? AS INTEGER))) END)"
        )
        args += [config.age_max, config.age_interval, now_step, config.age_interval]
        return f"(COALESCE(json_extract(manifest, '$.priority'), 0) + {queue} + {age})", args
    raise ValueError(f"sort={sort!r}: sorts are {', '.join(SORTS)}")


class JournalQuery:
    """Read-only listing queries on the journal's connection (the driver's thread)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def count(self, f: JobFilter) -> int:
        terms, args = _where(f)
        sql = "SELECT count(*) FROM jobs" + (" WHERE " + " AND ".join(terms) if terms else "")
        row = self._db.execute(sql, args).fetchone()
        return int(row[0])

    def page(
        self,
        f: JobFilter,
        *,
        sort: str,
        descending: bool,
        after: PageKey | None,
        limit: int,
        config: SchedulerConfig,
        now: float,
    ) -> tuple[list[tuple[int | float, int, str]], bool]:
        """Up to `limit` rows (sort value, job id, state) after `after`, and whether more follow."""
        terms, args = _where(f)
        expr, expr_args = _sort_expr(sort, config, now)
        if after is not None:
            op = "<" if descending else ">"
            if sort == "id":
                terms.append(f"id {op} ?")
                args.append(after.job_id)
            else:  # a row value: SQLite walks an index on (expr) from there
                terms.append(f"({expr}, id) {op} (?, ?)")
                args += [*expr_args, after.value, after.job_id]
        direction = "DESC" if descending else "ASC"
        # Without statistics the planner prefers jobs_state and sorts every active row;
        # in id order the partial index yields the page and stops.
        hint = " INDEXED BY jobs_active" if sort == "id" and f.states == ACTIVE_STATES else ""
        sql = (
            f"SELECT {expr}, id, state FROM jobs{hint}"
            + (" WHERE " + " AND ".join(terms) if terms else "")
            + f" ORDER BY {expr} {direction}, id {direction} LIMIT ?"
        )
        rows = self._db.execute(sql, [*expr_args, *args, *expr_args, limit + 1]).fetchall()
        more = len(rows) > limit
        return [(v, j, s) for v, j, s in rows[:limit]], more

    def states(self, ids: Sequence[int]) -> dict[int, JobState]:
        """The journaled state of each of `ids` that exists."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"SELECT id, state FROM jobs WHERE id IN ({marks})", list(ids))
        return {j: JobState(s) for j, s in rows}
