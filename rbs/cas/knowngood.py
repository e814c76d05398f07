"""Blob files this process has hashed and found good, so that a read need not hash again.

A blob file is named by its digest and written read-only, but the bytes on disk can
still change (a failing disk, a job running as root writing through a hardlink, an
operator). So every read checks the whole file before its first byte is served, and
remembers the answer keyed by what any change would alter: the path, the inode (a
replaced file), the mtime in nanoseconds (a write in place) and the size. A 1 GiB
blob read twice is hashed once. The memory is per process and bounded (least recently
checked entries go first); nothing is persisted, because a marker on disk would be
trusted by other processes without a check, and `rbs cas verify` re-hashes everything
regardless of what is remembered.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

# About 200 bytes an entry: 200,000 entries cost some 40 MB at most.
CAPACITY = 200_000

_Key = tuple[int, int, int]


def _key(st: os.stat_result) -> _Key:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class KnownGood:
    """A bounded LRU set of (path, inode, mtime_ns, size) that hashed to their digest."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, _Key] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, path: str, st: os.stat_result) -> bool:
        """Whether `path`, as `st` describes it now, was found good before."""
        with self._lock:
            if self._entries.get(path) != _key(st):
                return False
            self._entries.move_to_end(path)
            return True

    def add(self, path: str, st: os.stat_result) -> None:
        """Record that `path`, as `st` describes it, holds its digest's bytes."""
        with self._lock:
            self._entries[path] = _key(st)
            self._entries.move_to_end(path)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def retouched(self, path: str, before: os.stat_result, after: os.stat_result) -> None:
        """The store itself moved `path`'s mtime (a use) from `before` to `after`: a
        file known good before stays known good."""
        with self._lock:
            if self._entries.get(path) == _key(before) and before.st_ino == after.st_ino:
                self._entries[path] = _key(after)

    def forget(self, path: str) -> None:
        with self._lock:
            self._entries.pop(path, None)

    def __len__(self) -> int:
        return len(self._entries)
