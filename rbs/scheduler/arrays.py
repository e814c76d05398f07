"""Lazy task bookkeeping for jobs and arrays: a cursor over index ranges, never a row per task."""

from __future__ import annotations

import bisect
from collections import deque

from rbs.model import ArraySpec, JobState
from rbs.scheduler.instructions import PoolRecord

_SINGLE = ((0, 0, 1),)
_SINGLE_STARTS = (0,)
# Shared empty values: most jobs never retry nor skip, and a pending job should cost
# bytes, not an empty deque (760 B) and set (216 B) each. Replaced on first use.
_NO_RETRY: tuple[tuple[int, int, int, int], ...] = ()
_NO_SKIP: frozenset[int] = frozenset()


class TaskPool:
    """The pending, retrying and finished tasks of one job; O(1) per task taken or ended.

    Fresh indices come from a cursor walking the spec's ranges; tasks to run again
    (retries, requeues) wait in `retry` with their next attempt number and go first.
    Indices cancelled before the cursor reaches them sit in `skipped`. Only counts of
    finished tasks are kept; their details live in the journal's task rows.
    """

    __slots__ = (
        "counts",
        "fresh_left",
        "next_value",
        "range_i",
        "ranges",
        "retry",
        "skipped",
        "starts",
    )

    def __init__(self, spec: ArraySpec | None) -> None:
        self.ranges = spec.ranges if spec is not None else _SINGLE
        self.starts = (
            tuple(first for first, _, _ in self.ranges) if spec is not None else _SINGLE_STARTS
        )
        self.range_i = 0
        self.next_value = self.ranges[0][0]
        self.retry: deque[tuple[int, int, int, int]] | tuple[tuple[int, int, int, int], ...] = (
            _NO_RETRY
        )
        self.skipped: set[int] | frozenset[int] = _NO_SKIP
        self.counts: dict[JobState, int] = {}
        self.fresh_left = spec.size if spec is not None else 1

    @property
    def total(self) -> int:
        return sum((last - first) // step + 1 for first, last, step in self.ranges)

    @property
    def pending(self) -> int:
        return self.fresh_left - len(self.skipped) + len(self.retry)

    @property
    def finished(self) -> int:
        return sum(self.counts.values())

    def pop(self) -> tuple[int, int, int, int]:
        """The next task to start: (index, attempt, retries used, restarts used). Call only
        if pending."""
        if isinstance(self.retry, deque) and self.retry:
            return self.retry.popleft()
        while True:
            index = self._advance()
            if isinstance(self.skipped, set) and index in self.skipped:
                self.skipped.discard(index)
                continue
            return index, 1, 0, 0

    def _advance(self) -> int:
        index = self.next_value
        self.fresh_left -= 1
        _first, last, step = self.ranges[self.range_i]
        if index + step <= last:
            self.next_value = index + step
        elif self.range_i + 1 < len(self.ranges):
            self.range_i += 1
            self.next_value = self.ranges[self.range_i][0]
        else:
            self.next_value = last + 1  # exhausted
        return index

    def push_retry(
        self, index: int, attempt: int, retries_used: int, restarts_used: int = 0
    ) -> None:
        if not isinstance(self.retry, deque):
            self.retry = deque()
        self.retry.append((index, attempt, retries_used, restarts_used))

    def finish(self, state: JobState, n: int = 1) -> None:
        if n:
            self.counts[state] = self.counts.get(state, 0) + n

    def contains(self, index: int) -> bool:
        i = bisect.bisect_right(self.starts, index) - 1
        if i < 0:
            return False
        first, last, step = self.ranges[i]
        return index <= last and (index - first) % step == 0

    def is_fresh(self, index: int) -> bool:
        """Whether the cursor has not reached `index` yet (and it was not skipped)."""
        if not self.contains(index) or index in self.skipped or self.fresh_left == 0:
            return False
        i = bisect.bisect_right(self.starts, index) - 1
        return i > self.range_i or (i == self.range_i and index >= self.next_value)

    def cancel_index(self, index: int) -> bool:
        """Cancel one pending task; False if it is not pending (running or finished)."""
        for entry in self.retry:
            if entry[0] == index and isinstance(self.retry, deque):
                self.retry.remove(entry)
                self.finish(JobState.CANCELLED)
                return True
        if self.is_fresh(index):
            if not isinstance(self.skipped, set):
                self.skipped = set()
            self.skipped.add(index)
            self.finish(JobState.CANCELLED)
            return True
        return False

    def cancel_all(self) -> int:
        """Cancel every pending task; returns how many."""
        n = self.pending
        self.retry = _NO_RETRY
        self.skipped = _NO_SKIP
        self.fresh_left = 0
        self.range_i = len(self.ranges) - 1
        self.next_value = self.ranges[-1][1] + 1
        self.finish(JobState.CANCELLED, n)
        return n

    def to_record(self) -> PoolRecord:
        return PoolRecord(
            range_i=self.range_i,
            next_value=self.next_value,
            retry=tuple(self.retry),
            skipped=tuple(sorted(self.skipped)),
            counts=tuple(sorted((s.value, n) for s, n in self.counts.items())),
        )

    @classmethod
    def from_record(cls, spec: ArraySpec | None, rec: PoolRecord) -> TaskPool:
        pool = cls(spec)
        pool.range_i = rec.range_i
        pool.next_value = rec.next_value
        pool.retry = deque(rec.retry) if rec.retry else _NO_RETRY
        pool.skipped = set(rec.skipped) if rec.skipped else _NO_SKIP
        pool.counts = {JobState(s): n for s, n in rec.counts}
        # Fresh indices left: the rest of the current range plus every later range.
        left = 0
        if rec.range_i < len(pool.ranges):
            _first, last, step = pool.ranges[rec.range_i]
            if rec.next_value <= last:
                left += (last - rec.next_value) // step + 1
            left += sum((b - a) // s + 1 for a, b, s in pool.ranges[rec.range_i + 1 :])
        pool.fresh_left = left
        return pool
