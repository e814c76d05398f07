"""The release calendar: when each running task frees its resources at the latest, in time order.

A reservation asks "where will this request fit soonest, if everything runs to its
time limit?". Rather than sorting every worker's allocations on every pass, the core
keeps one calendar, updated when a run starts, is confirmed (its limit restarts), is
told to stop, or releases its last node: O(log R) per change for R running tasks. A
reservation walks it from the earliest release and stops at the first workers that
fit, so it visits only the releases before the reserved start.

Runs already told to stop (or draining after their gang ended) release "now": they
sit at -inf. Runs without a time limit never release by the calendar and are not in it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from sortedcontainers import SortedList

T = TypeVar("T")

STOPPING = -math.inf


class ReleaseCalendar(Generic[T]):
    """Items (runs) keyed by a hashable key, each with a release time, walked in time order."""

    def __init__(self) -> None:
        self._order: SortedList = SortedList()  # (time, seq)
        self._items: dict[int, T] = {}  # seq -> item
        self._at: dict[Hashable, tuple[float, int]] = {}  # key -> (time, seq)
        self._seq = 0

    def __len__(self) -> int:
        return len(self._at)

    def file(self, key: Hashable, item: T, time: float) -> None:
        """File `item` to release at `time` (math.inf: never, by the calendar)."""
        old = self._at.get(key)
        if old is not None and old[0] == time:
            self._items[old[1]] = item
            return
        self.drop(key)
        if time == math.inf:
            return
        self._seq += 1
        entry = (time, self._seq)
        self._order.add(entry)
        self._items[self._seq] = item
        self._at[key] = entry

    def drop(self, key: Hashable) -> None:
        old = self._at.pop(key, None)
        if old is not None:
            self._order.remove(old)
            del self._items[old[1]]

    def time_of(self, key: Hashable) -> float:
        entry = self._at.get(key)
        return entry[0] if entry is not None else math.inf

    def walk(self) -> Iterator[tuple[float, T]]:
        """(time, item) from the earliest release on; do not change the calendar meanwhile."""
        items = self._items
        for time, seq in self._order:
            yield time, items[seq]

    def keys(self) -> set[Hashable]:
        return set(self._at)
