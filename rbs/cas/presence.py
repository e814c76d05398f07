"""The FindMissing index of a disk store: every blob on disk, answered from memory.

`find_missing` of 100,000 digests costs 100,000 stat() calls without it (0.3-1 s here).
With `DiskStore(index=True)` the store keeps, per digest function, a table of every
blob under `blobs/<fn>/` with its size and last use, and answers from it alone:

- **Exact, per function.** A blob is keyed by its hash string's Python hash (64 bits,
  computed in C and cached on the string) and confirmed by its first 32 bits and its
  size, in an open-addressed table of parallel arrays (about 25 bytes a slot, 1.4 to 2.9
  slots a blob). A BLAKE3 and a SHA256 blob of the same hex name are separate entries.
  A false "present" needs a 96-bit match of two different hashes plus equal sizes.
- **Built from the disk.** At open, a thread lists and stats every blob (one folder at
  a time, under the index's lock) while `find_missing` still stats as without the
  index; `ready` is set when the table holds the whole store. The same scan repeats
  every `audit_s` seconds and drops entries whose file is gone, so a blob removed by
  hand (not through rbs) is reported present for at most that long.
- **Kept by the store.** Every write, delete and quarantine of this store updates it;
  so does a lookup that stats (`contains`, `open`, `check_missing`) and finds the
  disk disagreeing. Eviction asks `hide` before it moves a blob aside, which refuses
  a blob this index saw used within the lease, and `unhide` when it puts one back.
- **Other rbs processes** on the same folder (`rbs cas gc`, `rbs cas verify`, `rbs cas
  put --store`) journal what they do: while an index is open it leaves `INDEXED` in the
  store root, and a store without an index appends a line to `JOURNAL` (`<fn> <hash>`
  *before* it removes a blob, `<fn> <hash> <size>` after it wrote one). Each
  `find_missing` first reads what was appended since (one stat when nothing was): a
  removal drops the entry whatever the disk says, a write is added if its file is
  there. Such a blob is never reported present after its removal began. (A store looks
  for the marker before every removal, but before a write at most once a second while
  there is none: a write just after an index opened may be missed, which is a false
  "missing", an upload.)
- **Use tracking.** A blob's mtime is its last use (rbs.cas.disk). The index keeps the
  last use it knows per blob; a present blob whose last use is over `fresh_s` old is
  touched on disk by a background thread (`TOUCH_DEFER_S` later: the answer neither
  waits for it nor shares the interpreter with it), and its in-memory use is set at
  once, so the store's own eviction (`hide`) honours it before the touch lands. Another process's `rbs cas gc` sees only mtimes: a blob
  reported present in the milliseconds before its touch lands can be evicted by it,
  and the journal then makes the next lookup report it missing.

Blobs written into the folder by something other than rbs are reported missing until
this store stats them or the next audit; that costs a client one upload, which the
store then takes as already present. The index is for a store one process owns, such
as a server's (docs/design/cas.md).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping

from rbs.model import Digest, DigestFunction

# Marker and journal files in the store root (see the module docstring).
INDEXED, JOURNAL = "indexed", "journal"
AUDIT_INTERVAL = 900.0
TOUCH_DEFER_S = 0.05  # touches wait this long, so the answer that queued them goes first
# A str's hash is never -1 (CPython reserves it), so -1 marks an empty slot.
_EMPTY = -1
# Sizes of empty slots and of removed entries (tombstones, which probing walks past).
_NONE, _GONE = -1, -2
_MIN_SLOTS = 1 << 10


class _Table:
    """Open addressing with linear probing over parallel arrays; see the module docstring."""

    __slots__ = ("checks", "filled", "keys", "live", "marks", "mask", "sizes", "used")

    def __init__(self, slots: int) -> None:
        self.mask = slots - 1
        self.keys = array("q", [_EMPTY]) * slots
        self.sizes = array("q", [_NONE]) * slots
        self.checks = array("I", [0]) * slots
        self.used = array("I", [0]) * slots
        self.marks = bytearray(slots)
        self.live = 0
        self.filled = 0  # live entries and tombstones

    def slot(self, name: str) -> int:
        """The slot holding the blob `name` (any size), or -1."""
        k = hash(name)
        keys, sizes, mask = self.keys, self.sizes, self.mask
        i = k & mask
        check = -1
        while (kk := keys[i]) != _EMPTY:
            if kk == k and sizes[i] >= 0:
                if check < 0:
                    check = int(name[:8], 16)
                if self.checks[i] == check:
                    return i
            i = (i + 1) & mask
        return -1

    def put(self, name: str, size: int, used: int, mark: int) -> None:
        i = self.slot(name)
        if i >= 0:
            self.sizes[i] = size
            self.used[i] = max(self.used[i], used)
            self.marks[i] = mark
            return
        if (self.filled + 1) * 2 > self.mask + 1:  # at most half full
            raise _Full
        k = hash(name)
        keys, mask = self.keys, self.mask
        i = k & mask
        while keys[i] != _EMPTY and self.sizes[i] != _GONE:
            i = (i + 1) & mask
        if keys[i] == _EMPTY:
            self.filled += 1
        keys[i] = k
        self.sizes[i] = size
        self.checks[i] = int(name[:8], 16)
        self.used[i] = used
        self.marks[i] = mark
        self.live += 1

    def drop(self, i: int) -> tuple[int, int]:
        """Remove slot `i`'s entry (a tombstone); returns its (size, used)."""
        size, used = self.sizes[i], self.used[i]
        self.sizes[i] = _GONE
        self.live -= 1
        return size, used

    def entries(self) -> Iterator[tuple[int, int, int, int, int]]:
        """(key, check, size, used, mark) of every live entry."""
        sizes = self.sizes
        for i in range(self.mask + 1):
            if sizes[i] >= 0:
                yield self.keys[i], self.checks[i], sizes[i], self.used[i], self.marks[i]


class _Full(Exception):
    """The table must grow before it takes another entry."""


def _regrown(t: _Table) -> _Table:
    slots = t.mask + 1
    while t.live * 4 > slots:  # at most a quarter full afterwards
        slots *= 2
    new = _Table(max(_MIN_SLOTS, slots))
    keys, sizes, mask = new.keys, new.sizes, new.mask
    for k, check, size, used, mark in t.entries():
        i = k & mask
        while keys[i] != _EMPTY:
            i = (i + 1) & mask
        keys[i], sizes[i], new.checks[i], new.used[i], new.marks[i] = k, size, check, used, mark
    new.live = new.filled = t.live
    return new


class PresenceIndex:
    """Every blob of a disk store, per digest function; see the module docstring.

    `prefixes` are the store's blob folders (`<root>/blobs/<fn>/`); `touch(path)` records
    a use on disk (the store's throttled touch), called from a background thread."""

    def __init__(
        self,
        root: str,
        prefixes: Mapping[DigestFunction, str],
        touch: Callable[[str], None],
        *,
        fresh_s: float,
        audit_s: float = AUDIT_INTERVAL,
    ) -> None:
        self.fresh_s = fresh_s
        self.audit_s = audit_s
        self.ready = threading.Event()
        self._prefixes = dict(prefixes)
        self._tables = {fn: _Table(_MIN_SLOTS) for fn in DigestFunction}
        self._hidden: dict[tuple[DigestFunction, str], tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._mark = 1
        self._closed = threading.Event()
        self._journal = f"{root}/{JOURNAL}"
        self._journal_lock = threading.Lock()
        # Entries from before this open (up to `_replay_until`) are dropped only if the
        # file is gone by the time they are read: the blob may have been stored again.
        self._journal_at, self._replay_until = _journal_start(self._journal)
        self._marker = f"{root}/{INDEXED}"
        self._touch = touch
        self._touches: list[tuple[str, list[str]]] = []  # (folder prefix, hashes)
        self._touch_wake = threading.Condition(self._lock)
        self._touching = 0
        with open(self._marker, "w") as f:
            f.write(f"{os.getpid()}\n")
        self._threads = [
            threading.Thread(target=self._audit_loop, name="rbs-cas-index", daemon=True),
            threading.Thread(target=self._touch_loop, name="rbs-cas-touch", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # Lookups.

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        """The digests not in the store, each once, in the order asked (index ready):
        `missing_of` for each digest function asked."""
        asked = list(digests)
        by_fn: dict[DigestFunction, list[int]] = {}
        for at, d in enumerate(asked):
            by_fn.setdefault(d.function, []).append(at)
        found: list[int] = []
        for fn, ats in by_fn.items():
            got = self.missing_of(fn, [asked[a].hash for a in ats], [asked[a].size for a in ats])
            found.extend(ats[g] for g in got)
        if len(by_fn) > 1:
            found.sort()
        return [asked[a] for a in found]

    def missing_of(self, fn: DigestFunction, hashes: list[str], sizes: list[int]) -> list[int]:
        """`find_missing` for one function on plain lists (a server's request, with no
        Digest made per entry): the positions of the missing ones, each (hash, size)
        once, in the order asked. The caller has checked the hashes and sizes."""
        self._read_journal()
        missing: list[int] = []
        now = int(time.time()) + 1
        stale = now - self.fresh_s
        touches: list[str] = []  # hashes: the touch thread makes their paths
        with self._lock:
            t = self._tables[fn]
            keys, sizes_, checks, used, mask = t.keys, t.sizes, t.checks, t.used, t.mask
            for at, (h, size) in enumerate(zip(hashes, sizes, strict=True)):
                if size == 0:
                    continue
                k = hash(h)
                i = k & mask
                while (kk := keys[i]) != k or sizes_[i] != size or checks[i] != int(h[:8], 16):
                    if kk == -1:  # _EMPTY, as a constant: this loop is the hot path
                        i = -1
                        break
                    i = (i + 1) & mask
                if i < 0:
                    missing.append(at)
                elif used[i] < stale:
                    used[i] = now
                    touches.append(h)
            if touches:
                self._touches.append((self._prefixes[fn], touches))
                self._touch_wake.notify()
        if len({hashes[i] for i in missing}) < len(missing):
            firsts = {(hashes[i], sizes[i]): i for i in reversed(missing)}
            missing = sorted(firsts.values())
        return missing

    def holds(self, digest: Digest) -> bool:
        """Whether the index has the blob with this size (for tests and the audit)."""
        with self._lock:
            t = self._tables[digest.function]
            i = t.slot(digest.hash)
            return i >= 0 and t.sizes[i] == digest.size

    # What the store tells it.

    def added(self, fn: DigestFunction, name: str, size: int, when: float) -> None:
        """A blob of this store is on disk with `size`, used at `when` (a write, a stat)."""
        with self._lock:
            self._put(fn, name, size, int(when) + 1)

    def removed(self, fn: DigestFunction, name: str) -> None:
        """A blob of this store is gone, or about to go."""
        with self._lock:
            t = self._tables[fn]
            i = t.slot(name)
            if i >= 0:
                t.drop(i)

    def hide(self, fn: DigestFunction, name: str, lease_from: float | None) -> bool:
        """Before eviction moves a blob aside: False (kept) if used at or after
        `lease_from` as this index knows; else it is out of the index until `unhide`."""
        with self._lock:
            t = self._tables[fn]
            i = t.slot(name)
            if i < 0:
                return True
            if lease_from is not None and t.used[i] >= lease_from:
                return False
            self._hidden[(fn, name)] = t.drop(i)
            return True

    def unhide(self, fn: DigestFunction, name: str, evicted: bool) -> None:
        """Eviction is done with a hidden blob: back into the index unless evicted."""
        with self._lock:
            entry = self._hidden.pop((fn, name), None)
            if entry is not None and not evicted:
                self._put(fn, name, entry[0], entry[1])

    def _put(self, fn: DigestFunction, name: str, size: int, used: int) -> None:
        t = self._tables[fn]
        try:
            t.put(name, size, used, self._mark)
        except _Full:
            t = self._tables[fn] = _regrown(t)
            t.put(name, size, used, self._mark)

    def _read_journal(self) -> None:
        """Apply the removals other processes journalled since the last read."""
        with self._journal_lock:
            try:
                if os.stat(self._journal).st_size <= self._journal_at:
                    return
                with open(self._journal, "rb") as f:
                    f.seek(self._journal_at)
                    data = f.read()
            except FileNotFoundError:
                return
            whole = data.rfind(b"\n") + 1  # a line being appended is read next time
            at, self._journal_at = self._journal_at, self._journal_at + whole
        for line in data[:whole].decode("ascii", "replace").splitlines(keepends=True):
            at += len(line)
            with contextlib.suppress(ValueError, IndexError):
                fn_name, name, *added = line.split()
                fn = DigestFunction(fn_name)
                if not added and at > self._replay_until:
                    self.removed(fn, name)  # about to go: at once, whatever the disk says
                    continue
                # A write (or a removal from before this open): as the disk has it now.
                try:
                    st = os.stat(f"{self._prefixes[fn]}{name[:2]}/{name}")
                except FileNotFoundError:
                    self.removed(fn, name)
                    continue
                if added:
                    self.added(fn, name, st.st_size, st.st_mtime)

    # The scan, the audit and the touches.

    def _audit_loop(self) -> None:
        while not self._closed.is_set():
            # A folder that vanished mid-scan is seen by the next audit.
            with contextlib.suppress(OSError):
                self.audit()
            self.ready.set()
            self._closed.wait(self.audit_s)

    def audit(self) -> None:
        """Make the index what is on disk: every blob listed and stat'd, entries whose
        file is gone dropped. Safe while the store is in use (see the module docstring)."""
        with self._lock:
            self._mark = self._mark % 255 + 1
            mark = self._mark
        for fn, prefix in self._prefixes.items():
            try:
                with os.scandir(prefix) as top:
                    folders = sorted(e.path for e in top if e.is_dir(follow_symlinks=False))
            except FileNotFoundError:
                continue
            for folder in folders:
                if self._closed.is_set():
                    return
                # Under the lock from the listing to the update: a write or removal
                # racing the scan updates the index after it, never before it.
                with self._lock:
                    for name, size, mtime in _listing(folder):
                        self._put(fn, name, size, int(mtime))
        self._sweep(mark)

    def _sweep(self, mark: int) -> None:
        """Drop every entry the last scan did not find or nothing put since."""
        for fn in DigestFunction:
            with self._lock:
                t = self._tables[fn]
                for i in range(t.mask + 1):
                    if t.sizes[i] >= 0 and t.marks[i] != mark:
                        t.drop(i)

    def _touch_loop(self) -> None:
        while True:
            with self._lock:
                while not self._touches and not self._closed.is_set():
                    self._touch_wake.wait()
                batch, self._touches = self._touches, []
                self._touching = len(batch)
                if not batch and self._closed.is_set():
                    return
            self._closed.wait(TOUCH_DEFER_S)
            for prefix, hashes in batch:
                for h in hashes:
                    self._touch(f"{prefix}{h[:2]}/{h}")
            with self._lock:
                self._touching = 0
                self._touch_wake.notify_all()

    def flush_touches(self, timeout: float = 60.0) -> bool:
        """Wait until every queued touch is on disk (before an eviction pass)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._touches or self._touching:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._touch_wake.wait(left)
        return True

    def memory_bytes(self) -> int:
        """What the tables take, in bytes."""
        return sum(25 * (t.mask + 1) for t in self._tables.values())

    def __len__(self) -> int:
        return sum(t.live for t in self._tables.values())

    def close(self) -> None:
        """Stop the threads and take the marker away (other processes stop journalling)."""
        self._closed.set()
        with self._lock:
            self._touch_wake.notify_all()
        for t in self._threads:
            t.join(timeout=10)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._marker)


def _listing(folder: str) -> Iterator[tuple[str, int, float]]:
    """(name, size, mtime) of every blob file in one shard folder."""
    with os.scandir(folder) as files:
        for f in files:
            if len(f.name) < 8:
                continue
            try:
                st = f.stat(follow_symlinks=False)
                int(f.name[:8], 16)
            except (FileNotFoundError, ValueError):
                continue
            yield f.name, st.st_size, st.st_mtime


def _journal_start(path: str) -> tuple[int, int]:
    """Where to start reading the journal: its last 64 KiB again (a removal journalled
    just before this open may not have reached the disk when the scan looked), or from
    the start of a fresh one when it has grown past 8 MiB. Returns (start, end of what
    was there)."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return 0, 0
    if size > 8 << 20:
        os.truncate(path, 0)
        return 0, 0
    return max(0, size - (64 << 10)), size


class Journal:
    """What a store without an index writes for an index another process holds on the
    same folder (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._none_until = 0.0  # no marker seen: writes skip the check until then

    def removing(self, fn: DigestFunction, name: str) -> None:
        """A blob is about to go: always checked, so no open index misses it."""
        if os.path.exists(f"{self.root}/{INDEXED}"):
            self._append(f"{fn.value} {name}\n")

    def added(self, fn: DigestFunction, name: str, size: int) -> None:
        """A blob was written. The marker is looked for at most once a second while
        absent: a write an index misses is only reported missing (an upload)."""
        now = time.monotonic()
        if now < self._none_until:
            return
        if not os.path.exists(f"{self.root}/{INDEXED}"):
            self._none_until = now + 1.0
            return
        self._append(f"{fn.value} {name} {size}\n")

    def _append(self, line: str) -> None:
        fd = os.open(f"{self.root}/{JOURNAL}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
