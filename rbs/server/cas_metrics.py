"""The server's CAS with counts for /metrics: lookups that hit or missed, and evictions.

A `DiskStore` that counts, not a wrapper around one: the server's parts call the
store's disk-only methods too (`sweep_tmp`, `stat`, `gc`), and a subclass keeps every
one of them, the presence index (`index=True`) included. Lookups are the digests
`find_missing` is asked about (FindMissingBlobs, the jobs API's /v1/cas/missing, the
action cache's check of a result's outputs), each distinct non-empty digest once,
counted by its hash string (a `str` caches its hash, where a `Digest` hashes in Python),
so counting costs a small part of what the index's answer does; evictions are what
`gc` removed, automatic or asked. Plain integers under one lock: `find_missing` runs on
many threads at once.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Iterable
from itertools import compress
from pathlib import Path
from typing import Any

from rbs.cas.disk import DiskStore
from rbs.cas.eviction import GcResult, Pinning
from rbs.model import Digest, DigestFunction


class CountingDiskStore(DiskStore):
    """A DiskStore that counts lookup hits and misses and the blobs and bytes evicted."""

    def __init__(self, root: Path, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self._count_lock = threading.Lock()
        self.lookup_hits = 0
        self.lookup_misses = 0
        self.evicted_blobs = 0
        self.evicted_bytes = 0
        # What eviction keeps whatever its age (rbs.server.input_pins.InputPins.pinned).
        self.pins: Pinning | None = None

    def pinned(self) -> frozenset[str]:
        return self.pins.pinned() if self.pins is not None else frozenset()

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        asked = digests if isinstance(digests, list | tuple) else list(digests)
        missing = super().find_missing(asked)  # each missing digest once, in asked order
        distinct = len({d.hash for d in asked if d.size})
        with self._count_lock:
            self.lookup_misses += len(missing)
            self.lookup_hits += distinct - len(missing)
        return missing

    def present_of(
        self, fn: DigestFunction, keys: list[bytes], codes: list[int]
    ) -> list[bool] | None:
        """The index's `present` (keys and size codes, as rbs.cas.presence defines them),
        counted by key; None while the index is not ready."""
        if self.index is None or not self.index.ready.is_set():
            return None
        found, hits = self.index.present(fn, keys, codes)
        misses = len(set(compress(keys, map(operator.not_, found))))
        with self._count_lock:
            self.lookup_misses += misses
            self.lookup_hits += hits
        return found

    def gc(self, max_size: int | None = None, *, target: int | None = None) -> GcResult:
        result = super().gc(max_size, target=target)
        with self._count_lock:
            self.evicted_blobs += result.removed_blobs
            self.evicted_bytes += result.removed_bytes
        return result
