"""`GET /v1/jobs`: paged, filtered, sorted job listings, served from the journal's indexes.

The query (`rbs.wire.jobs_api_requests.list_params`) becomes a `JobFilter` and a sort;
`rbs.scheduler.journal_query.JournalQuery` finds one page of job ids and the total in
SQLite, and only the jobs on the page become documents: a job the core holds is shown
from its live view (live priority, pending reason, active runs), any other from its
journal row (`rbs.server.job_records.record_view`). So a page costs the same at 100 jobs
and at a million, and nothing is built for the jobs the filter excludes.

The cursor is opaque to clients: base64url of the JSON `[sort, descending, value, id]`,
the sort key and id of the page's last row. A cursor made for another sort is refused,
so a client cannot mix pages of two orders. Priorities move as jobs age, so a page
boundary in `sort=priority` is the priority the row had when its page was read: a job
that ages past the boundary between two reads is on neither page or on both, as in any
keyset listing over a changing key; the other sorts' keys never change.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from rbs.model import ACTIVE_STATES, JobState
from rbs.scheduler.journal_query import JobFilter, PageKey
from rbs.scheduler.state import SchedulerError
from rbs.scheduler.views import JobView
from rbs.server.job_driver import JobDriver
from rbs.server.job_records import record_view
from rbs.wire import jobs_api
from rbs.wire.errors import InvalidRequest
from rbs.wire.jobs_api_requests import ListParams

# The order each sort lists in when the query names none: the most urgent first.
DEFAULT_DESCENDING = {"id": False, "submit": False, "state": False, "priority": True}


def job_filter(p: ListParams) -> JobFilter:
    """The jobs a query asks for: the named states, else the active ones (every state
    with `history`)."""
    if p.states:
        states = frozenset(JobState[s] for s in p.states)
    elif p.history:
        states = frozenset(JobState)
    else:
        states = ACTIVE_STATES
    return JobFilter(
        states=states, queue=p.queue, user=p.user, name=p.name, array=p.array, parent=p.parent
    )


def encode_cursor(sort: str, descending: bool, key: PageKey) -> str:
    raw = json.dumps([sort, descending, key.value, key.job_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(text: str, sort: str, descending: bool) -> PageKey:
    """The key a cursor names; InvalidRequest when it is not one this listing made."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        got_sort, got_desc, value, job_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        raise InvalidRequest("cursor: not a cursor this server made") from None
    ok_value = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok_value and isinstance(job_id, int) and isinstance(got_desc, bool)):
        raise InvalidRequest("cursor: not a cursor this server made")
    if got_sort != sort or got_desc != descending:
        order = "desc" if got_desc else "asc"
        raise InvalidRequest(
            f"cursor: it pages sort={got_sort} order={order}; ask with the same sort and order"
        )
    return PageKey(value=value, job_id=job_id)


class JobListing:
    """Pages of the driver's jobs."""

    def __init__(self, driver: JobDriver) -> None:
        self._driver = driver
        self._query = driver.store.query()

    def page(self, p: ListParams, now: float) -> dict[str, Any]:
        """The `jobs` document of one page (rbs.wire.jobs_api.jobs_doc)."""
        f = job_filter(p)
        descending = DEFAULT_DESCENDING[p.sort] if p.descending is None else p.descending
        after = None if p.cursor is None else decode_cursor(p.cursor, p.sort, descending)
        config = self._driver.config
        rows, more = self._query.page(
            f,
            sort=p.sort,
            descending=descending,
            after=after,
            limit=p.limit,
            config=config,
            now=now,
        )
        views = [self._view(job_id, now) for _, job_id, _ in rows]
        cursor = None
        if more and rows:
            value, job_id, _ = rows[-1]
            cursor = encode_cursor(p.sort, descending, PageKey(value=value, job_id=job_id))
        return jobs_api.jobs_doc(views, total=self._query.count(f), next_cursor=cursor)

    def _view(self, job_id: int, now: float) -> JobView:
        try:
            return self._driver.sched.job(job_id)
        except SchedulerError:
            rec = self._driver.store.job_record(job_id)
            if rec is None:  # cannot happen: the row was just read on this thread
                raise
            return record_view(self._driver.config, rec, self._driver.state_of, now)
