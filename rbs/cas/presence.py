"""The FindMissing index of a disk store: every blob on disk, answered from memory.

`find_missing` of 100,000 digests costs 100,000 stat() calls without it (0.3-1 s here).
With `DiskStore(index=True)` the store keeps, per digest function, every blob under
`blobs/<fn>/` with its size, and answers from that alone:

- **Exact, per function, looked up in C.** A blob is a `dict` entry keyed by its whole
  hash's 32 bytes (`bytes.fromhex(hash)`), whose value is its size's `size_code` (the
  protobuf varint of the size read as a little-endian integer, so a server can take it
  straight off a request's bytes) shifted left once, with the audit's mark in the low
  bit. A lookup of many digests is a few passes of `map` over C functions (`dict.get`,
  `operator`), with no Python code per digest: `present`. About 165 bytes a blob (the
  dict's slot, a 32-byte key and the value; `memory_bytes`): about 160 MiB for a million.
  A BLAKE3 and a SHA256 blob of the same hex name are entries of separate dicts.
- **Built from the disk.** At open, a thread lists and stats every blob (one folder at
  a time, under the index's lock) while `find_missing` still stats as without the
  index; `ready` is set when the index holds the whole store. The same scan repeats
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
  uses it saw in the last `fresh_s` seconds (two generations of `fresh_s / 2`, each a
  dict of hash -> time, so memory follows recent traffic, not the store); a present
  blob not among them is touched on disk by a background thread (`TOUCH_DEFER_S`
  later: the answer neither waits for it nor shares the interpreter with it), and its
  use is recorded at once, so the store's own eviction (`hide`) honours it before the
  touch lands; an older use is on disk by then (eviction flushes the touches first).
  Another process's `rbs cas gc` sees only mtimes: a blob reported present in the
  milliseconds before its touch lands can be evicted by it, and the journal then makes
  the next lookup report it missing.

Blobs written into the folder by something other than rbs are reported missing until
this store stats them or the next audit; that costs a client one upload, which the
store then takes as already present. The index is for a store one process owns, such
as a server's (docs/design/cas.md).
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import compress, repeat

from rbs.model import Digest, DigestFunction

# Marker and journal files in the store root (see the module docstring).
INDEXED, JOURNAL = "indexed", "journal"
AUDIT_INTERVAL = 900.0
TOUCH_DEFER_S = 0.05  # touches wait this long, so the answer that queued them goes first
# Generations of recent uses hold at most this many entries each; past it a generation
# ends early (the price: a few more touches, each a stat).
_GEN_MAX = 1 << 20
_ABSENT = -2  # what `dict.get` gives for an unknown blob: no size code is negative
_BLOB_NAME = re.compile("[0-9a-f]{64}").fullmatch
# Per blob, beyond the dict's own table: a 32-byte key and an int value (the allocator
# rounds each object up to 16 bytes).
_OBJECTS_PER_BLOB = sum(-(-sys.getsizeof(x) // 16) * 16 for x in (bytes(32), 1 << 40))


def size_code(size: int) -> int:
    """`size`'s protobuf varint read as a little-endian integer: one to one, and what
    a request carries for the size (rbs.wire.find_missing reads it off the bytes)."""
    if size < 0x80:
        return size
    out = bytearray()
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return int.from_bytes(out, "little")


def size_of_code(code: int) -> int:
    """The size a `size_code` stands for."""
    size = 0
    for i, b in enumerate(code.to_bytes(max(1, (code.bit_length() + 7) // 8), "little")):
        size |= (b & 0x7F) << (7 * i)
    return size


def blob_key(name: str) -> bytes:
    """A blob's key in the index: its hash's bytes (`name` is lowercase hex)."""
    return bytes.fromhex(name)


class _Recent:
    """The uses of one digest function's blobs seen in the last `fresh_s` seconds:
    two generations (dicts of key -> time), each at most `fresh_s / 2` long."""

    __slots__ = ("cur", "prev", "since", "span")

    def __init__(self, fresh_s: float) -> None:
        self.span = max(fresh_s / 2, 1e-3)
        self.cur: dict[bytes, int] = {}
        self.prev: dict[bytes, int] = {}
        self.since = time.time()

    def roll(self, now: float) -> None:
        """Start a new generation when the current one is `span` old (or full)."""
        if now - self.since >= 2 * self.span:
            self.cur, self.prev, self.since = {}, {}, now
        elif now - self.since >= self.span or len(self.cur) >= _GEN_MAX:
            self.cur, self.prev, self.since = {}, self.cur, now

    def used(self, key: bytes) -> int:
        """The last use seen of a blob, or 0."""
        return max(self.cur.get(key, 0), self.prev.get(key, 0))

    def record(self, key: bytes, when: int) -> None:
        if when > self.cur.get(key, 0):
            self.cur[key] = when


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
        # key -> size_code << 1 | mark (the audit's, alternating 0 and 1).
        self._blobs: dict[DigestFunction, dict[bytes, int]] = {fn: {} for fn in DigestFunction}
        self._recent = {fn: _Recent(fresh_s) for fn in DigestFunction}
        self._hidden: dict[tuple[DigestFunction, bytes], int] = {}
        self._lock = threading.Lock()
        self._audit_lock = threading.Lock()  # one audit at a time (each flips the mark)
        self._mark = 0
        self._closed = threading.Event()
        self._journal = f"{root}/{JOURNAL}"
        self._journal_lock = threading.Lock()
        # Entries from before this open (up to `_replay_until`) are dropped only if the
        # file is gone by the time they are read: the blob may have been stored again.
        self._journal_at, self._replay_until = _journal_start(self._journal)
        self._marker = f"{root}/{INDEXED}"
        self._touch = touch
        self._touches: list[tuple[str, list[bytes]]] = []  # (folder prefix, keys)
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
        """`find_missing` for one function on plain lists: the positions of the missing
        ones, each (hash, size) once, in the order asked. The caller has checked the
        hashes and sizes."""
        keys = list(map(bytes.fromhex, hashes))
        present, _ = self.present(fn, keys, list(map(size_code, sizes)))
        missing = list(compress(range(len(keys)), map(operator.not_, present)))
        if len({keys[i] for i in missing}) < len(missing):
            firsts = {(keys[i], sizes[i]): i for i in reversed(missing)}
            missing = sorted(firsts.values())
        return missing

    def present(
        self, fn: DigestFunction, keys: list[bytes], codes: list[int]
    ) -> tuple[list[bool], int]:
        """Whether each blob (`blob_key` of its hash, `size_code` of its size) is in the
        store, the empty blob (code 0) always: C passes over the lists, no Python code
        per blob; and how many distinct non-empty blobs were found. A present blob not
        used in the last `fresh_s` seconds is recorded as used now and queued for a
        touch. The caller has checked the hashes and sizes."""
        self._read_journal()
        now = int(time.time()) + 1
        eq, rshift = operator.eq, operator.rshift
        with self._lock:
            blobs = self._blobs[fn]
            # Pass by pass, not one chain of maps: a pass of lookups alone keeps more
            # of them in flight, which a million-blob index (most lookups a cache
            # miss) shows (0.037 s against 0.055 s for 100,000 here).
            got = list(map(blobs.get, keys, repeat(_ABSENT)))
            got = list(map(rshift, got, repeat(1)))
            found = list(map(eq, got, codes))
            held = found
            if 0 in codes:  # the empty blob: present whatever the store holds, no file
                found = list(map(operator.or_, found, map(operator.not_, codes)))
            recent = self._recent[fn]
            recent.roll(now)
            hits = set(compress(keys, held))
            stale = hits.difference(recent.cur).difference(recent.prev)
            if stale:
                recent.cur.update(dict.fromkeys(stale, now))
                self._touches.append((self._prefixes[fn], list(stale)))
                self._touch_wake.notify()
        return found, len(hits)

    def holds(self, digest: Digest) -> bool:
        """Whether the index has the blob with this size (for tests and the audit)."""
        with self._lock:
            value = self._blobs[digest.function].get(blob_key(digest.hash), _ABSENT)
            return value >> 1 == size_code(digest.size)

    # What the store tells it.

    def added(self, fn: DigestFunction, name: str, size: int, when: float) -> None:
        """A blob of this store is on disk with `size`, used at `when` (a write, a stat)."""
        with self._lock:
            self._put(fn, blob_key(name), size_code(size), int(when) + 1)

    def removed(self, fn: DigestFunction, name: str) -> None:
        """A blob of this store is gone, or about to go."""
        with self._lock:
            self._blobs[fn].pop(blob_key(name), None)

    def hide(self, fn: DigestFunction, name: str, lease_from: float | None) -> bool:
        """Before eviction moves a blob aside: False (kept) if used at or after
        `lease_from` as this index knows; else it is out of the index until `unhide`."""
        key = blob_key(name)
        with self._lock:
            blobs = self._blobs[fn]
            if key not in blobs:
                return True
            if lease_from is not None and self._recent[fn].used(key) >= lease_from:
                return False
            self._hidden[(fn, key)] = blobs.pop(key)
            return True

    def unhide(self, fn: DigestFunction, name: str, evicted: bool) -> None:
        """Eviction is done with a hidden blob: back into the index unless evicted."""
        with self._lock:
            value = self._hidden.pop((fn, blob_key(name)), None)
            if value is not None and not evicted:
                self._blobs[fn][blob_key(name)] = value >> 1 << 1 | self._mark

    def _put(self, fn: DigestFunction, key: bytes, code: int, used: int) -> None:
        self._blobs[fn][key] = code << 1 | self._mark
        if used > time.time() - self.fresh_s:
            self._recent[fn].record(key, used)

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
                if not _BLOB_NAME(name):
                    continue
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
        with self._audit_lock:
            with self._lock:
                self._mark ^= 1
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
                            self._put(fn, blob_key(name), size_code(size), int(mtime))
            self._sweep(mark)

    def _sweep(self, mark: int) -> None:
        """Drop every entry the last scan did not find or nothing put since."""
        for fn in DigestFunction:
            with self._lock:
                blobs = self._blobs[fn]
                marks = map(operator.and_, blobs.values(), repeat(1))
                if mark:
                    marks = map(operator.not_, marks)
                for key in list(compress(blobs.keys(), marks)):
                    del blobs[key]

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
            for prefix, keys in batch:
                for key in keys:
                    name = key.hex()
                    self._touch(f"{prefix}{name[:2]}/{name}")
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
        """What the index takes, in bytes (the dicts' tables and, per blob, its key and
        value objects; the generations of recent uses left out)."""
        with self._lock:
            return sum(sys.getsizeof(d) + len(d) * _OBJECTS_PER_BLOB for d in self._blobs.values())

    def __len__(self) -> int:
        return sum(len(d) for d in self._blobs.values())

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
            if not _BLOB_NAME(f.name):
                continue
            try:
                st = f.stat(follow_symlinks=False)
            except FileNotFoundError:
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
