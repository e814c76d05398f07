"""Size-bounded LRU eviction with a lease for the disk store, and its statistics.

A blob's last use is its file's mtime (see rbs.cas.disk). `collect` evicts the least
recently used blobs until the store fits its target, and never a blob used within
the lease. To close the race with a process that uses a blob while gc decides to
evict it, a blob is first renamed out of sight, then its mtime is read again: if it
was touched meanwhile it is put back, and a lookup that ran after the rename simply
found it missing (so its caller uploads it again) instead of trusting a blob about to
disappear.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from rbs.model import DigestFunction

# A temp file untouched this long belongs to a writer that died.
STALE_TMP = 3600.0
# A used blob's mtime is refreshed at most this often (rbs.cas.disk throttles its
# touches by it); the lease is extended by as much to stay a guarantee.
TOUCH_INTERVAL = 60.0
_counter = itertools.count()


class EvictableStore(Protocol):
    """What eviction reads of a disk store: its folders and its bounds.

    rbs.cas.disk.DiskStore is one; taking the protocol instead of importing it keeps
    the arrow one way (disk uses eviction, never the reverse).
    """

    @property
    def root(self) -> Path: ...
    @property
    def blob_dir(self) -> Path: ...
    @property
    def exec_dir(self) -> Path: ...
    @property
    def tmp_dir(self) -> Path: ...
    @property
    def max_size(self) -> int | None: ...
    @property
    def lease(self) -> float: ...


@runtime_checkable
class Pinning(Protocol):
    """A store some of whose blobs are kept whatever their age (the server keeps the
    input trees of jobs in history: rbs.server.input_pins)."""

    def pinned(self) -> frozenset[str]: ...


@runtime_checkable
class Tracking(Protocol):
    """A store that keeps track of its blobs besides the files (rbs.cas.presence):
    told before a blob is moved aside, and after, whether it is gone."""

    def evicting(self, fn: DigestFunction, name: str, lease_from: float | None) -> bool: ...
    def evicted(self, fn: DigestFunction, name: str, *, removed: bool) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionStats:
    """Blobs of one digest function."""

    function: DigestFunction
    blobs: int
    bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreStats:
    """What a disk store holds; sizes count executable twins too (they take space)."""

    root: Path
    blobs: int
    total_bytes: int
    by_function: tuple[FunctionStats, ...]
    leased_blobs: int
    leased_bytes: int
    temp_files: int
    oldest_use: float | None
    newest_use: float | None
    max_size: int | None
    lease: float


@dataclass(frozen=True, slots=True, kw_only=True)
class GcResult:
    """What one eviction pass did."""

    target: int | None
    before_bytes: int
    after_bytes: int
    removed_blobs: int
    removed_bytes: int
    leased_bytes: int
    temp_removed: int

    @property
    def over_target(self) -> bool:
        """True when blobs in their lease alone keep the store above the target."""
        return self.target is not None and self.after_bytes > self.target


@dataclass(slots=True)
class _BlobEntry:
    function: DigestFunction
    name: str
    size: int
    last_use: float
    paths: list[str]
    has_blob: bool


def _scan(store: EvictableStore) -> list[_BlobEntry]:
    """Every digest with a file under blobs/ or exec/ (an orphaned executable twin
    has no blob: `has_blob` is False)."""
    entries: dict[tuple[DigestFunction, str], _BlobEntry] = {}
    for base in (store.blob_dir, store.exec_dir):
        is_blob = base == store.blob_dir
        for fn in DigestFunction:
            top = base / fn.value
            if not top.is_dir():
                continue
            with os.scandir(top) as shards:
                shard_dirs = [s.path for s in shards if s.is_dir(follow_symlinks=False)]
            for shard in shard_dirs:
                with os.scandir(shard) as files:
                    for f in files:
                        try:
                            st = f.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        e = entries.get((fn, f.name))
                        if e is None:
                            entries[(fn, f.name)] = _BlobEntry(
                                fn, f.name, st.st_size, st.st_mtime, [f.path], is_blob
                            )
                        else:
                            e.size += st.st_size
                            e.last_use = max(e.last_use, st.st_mtime)
                            e.paths.append(f.path)
                            e.has_blob = e.has_blob or is_blob
    return list(entries.values())


def lease_start(store: EvictableStore, now: float) -> float:
    """Blobs used at or after this time are in their lease."""
    # Touches are throttled, so a blob used just now may show a mtime up to
    # TOUCH_INTERVAL old: the lease is extended by that much to stay a guarantee.
    # A lease of zero promises nothing, so it gets no extension either.
    return now - store.lease - (TOUCH_INTERVAL if store.lease > 0 else 0.0)


def stat(store: EvictableStore, now: float | None = None) -> StoreStats:
    now = time.time() if now is None else now
    scanned = _scan(store)
    blobs = [e for e in scanned if e.has_blob]
    leased = [e for e in blobs if e.last_use >= lease_start(store, now)]
    per_fn = []
    for fn in DigestFunction:
        mine = [e for e in blobs if e.function is fn]
        if mine:
            per_fn.append(
                FunctionStats(function=fn, blobs=len(mine), bytes=sum(e.size for e in mine))
            )
    uses = [e.last_use for e in blobs]
    with os.scandir(store.tmp_dir) as tmp:
        temp_files = sum(1 for _ in tmp)
    return StoreStats(
        root=store.root,
        blobs=len(blobs),
        total_bytes=sum(e.size for e in scanned),
        by_function=tuple(per_fn),
        leased_blobs=len(leased),
        leased_bytes=sum(e.size for e in leased),
        temp_files=temp_files,
        oldest_use=min(uses, default=None),
        newest_use=max(uses, default=None),
        max_size=store.max_size,
        lease=store.lease,
    )


def collect(store: EvictableStore, target: int | None, now: float | None = None) -> GcResult:
    """Evict until the store holds at most `target` bytes (None: only clean up temp
    files and orphaned executable twins)."""
    now = time.time() if now is None else now
    temp_removed = sweep_tmp(store, STALE_TMP, now)
    scanned = _scan(store)
    before = sum(e.size for e in scanned)
    total = before
    removed = removed_bytes = 0
    for e in scanned:
        if not e.has_blob and _evict(store, e, None):
            total -= e.size
    start = lease_start(store, now)
    leased_bytes = sum(e.size for e in scanned if e.has_blob and e.last_use >= start)
    if target is not None and total > target:
        keep = store.pinned() if isinstance(store, Pinning) else frozenset()
        old = (e for e in scanned if e.has_blob and e.last_use < start and e.name not in keep)
        for e in sorted(old, key=_lru):
            if total <= target:
                break
            if _evict(store, e, start):
                total -= e.size
                removed += 1
                removed_bytes += e.size
    return GcResult(
        target=target,
        before_bytes=before,
        after_bytes=total,
        removed_blobs=removed,
        removed_bytes=removed_bytes,
        leased_bytes=leased_bytes,
        temp_removed=temp_removed,
    )


def _lru(e: _BlobEntry) -> float:
    return e.last_use


def _evict(store: EvictableStore, e: _BlobEntry, lease_from: float | None) -> bool:
    """Remove one digest's files unless it was used since the scan (see the module
    docstring). Returns whether it was removed."""
    track = store if isinstance(store, Tracking) else None
    if track is not None and not track.evicting(e.function, e.name, lease_from):
        return False
    hidden = []
    for path in e.paths:
        aside = f"{store.tmp_dir}/evict.{e.name[:16]}.{os.getpid()}.{next(_counter)}"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            continue
        hidden.append((path, aside))
    touched = False
    if lease_from is not None:
        for _, aside in hidden:
            with contextlib.suppress(FileNotFoundError):
                touched = touched or os.stat(aside).st_mtime >= lease_from
    for path, aside in hidden:
        if touched:
            os.rename(aside, path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(aside)
    if track is not None:
        track.evicted(e.function, e.name, removed=not (hidden and touched))
    return bool(hidden) and not touched


def sweep_tmp(store: EvictableStore, older_than: float, now: float | None = None) -> int:
    """Remove temp files not written to for `older_than` seconds; returns how many."""
    now = time.time() if now is None else now
    n = 0
    with os.scandir(store.tmp_dir) as entries:
        for f in entries:
            with contextlib.suppress(FileNotFoundError):
                if f.stat(follow_symlinks=False).st_mtime <= now - older_than:
                    os.unlink(f.path)
                    n += 1
    return n
