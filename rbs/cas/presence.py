"""The FindMissing index of a disk store: which blobs are on disk, answered without a stat.

`find_missing` of 100,000 digests costs 100,000 stat() calls without it (0.3-0.6 s
here). With `DiskStore(index=True)` the store keeps, per shard folder
(`blobs/<fn>/<hh>/`), a bitmap of the names in it: bit `int(name[2:10], 16) % bits`
is set for every blob name there, with 32 to 128 bits per name (8 MB for a million
blobs as first read). The bitmap is filled by one listdir the first time a lookup needs
that shard, and updated by every write of this process. The store also remembers the
blobs it found or stored within the last minute (`TOUCH_INTERVAL`, or the lease if
shorter), with their size.

A lookup answers from memory in two cases only, and stats the file otherwise:

- the name's bit is clear: no blob of that name is in the folder, so it is missing;
- the blob was found or stored by this process within the last minute with this size:
  it is present, and the lease (a blob used within it is never evicted, by any
  process) keeps it there.

A set bit (the blob, or another name on the same bit: about 1 in 32) is confirmed
with a stat, as without the index, and the blob is then remembered for a minute. So
a blob removed by any process is never reported present beyond that minute's lease
guarantee. Bits are never cleared on removal (another name may share them); an
eviction pass re-reads the shards (`forget_shards`). What the index does not see is
a blob that another process writes into the same store: until this process writes or
finds it, or re-reads the shard, it is reported missing, which costs the client an
upload the store then takes as already present. That is why the index is for a store
that one process writes, such as a server's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from rbs.model import Digest, DigestFunction

# At least this many bits per name in a shard's bitmap, and at least this many bits.
BITS_PER_NAME = 32
MIN_BITS = 1 << 12


class _Shard:
    """The bitmap of one shard folder's names."""

    __slots__ = ("bits", "capacity", "mask", "names")

    def __init__(self, names: list[str]) -> None:
        size = MIN_BITS
        while size < BITS_PER_NAME * 2 * max(1, len(names)):
            size *= 2
        self.mask = size - 1
        self.bits = bytearray(size // 8)
        self.names = 0
        self.capacity = size // BITS_PER_NAME
        for n in names:
            if _is_name(n):
                self.add(n)

    def add(self, name: str) -> None:
        k = int(name[2:10], 16) & self.mask
        self.bits[k >> 3] |= 1 << (k & 7)
        self.names += 1

    def may_hold(self, name: str) -> bool:
        k = int(name[2:10], 16) & self.mask
        return bool(self.bits[k >> 3] >> (k & 7) & 1)


class PresenceIndex:
    """Name bitmaps per shard folder, and the blobs used within `fresh_s` seconds."""

    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self._shards: dict[str, _Shard] = {}
        # hash -> (size, time it was last found or stored, as time.time()).
        self._recent: dict[str, tuple[int, float]] = {}
        self._prune_at = 1 << 16
        self._lock = threading.Lock()

    def find_missing(
        self,
        digests: Iterable[Digest],
        prefixes: Mapping[DigestFunction, str],
        present: Callable[[str, Digest], bool],
    ) -> list[Digest]:
        """The digests not in the store whose blob folders are `prefixes` (`<fn dir>/`).

        `present(path, digest)` is the store's own check, run where the index cannot
        answer: a stat, a size check (a wrong size removes the blob) and a touch."""
        missing = []
        now = time.time()
        fresh_after = now - self.fresh_s
        recent = self._recent
        shards: dict[str, _Shard] = {}
        fn: DigestFunction | None = None
        prefix = ""
        for d in digests:
            h, size = d.hash, d.size
            if size == 0:
                continue
            seen = recent.get(h)
            if seen is not None and seen[0] == size and seen[1] >= fresh_after:
                continue
            if d.function is not fn:  # an enum's hash is Python code: look up on change only
                fn = d.function
                prefix = prefixes[fn]
            folder = prefix + h[:2]
            shard = shards.get(folder)
            if shard is None:
                shard = shards[folder] = self.shard(folder)
            if not shard.may_hold(h):
                missing.append(d)
            elif present(f"{folder}/{h}", d):
                self.used(h, size, now)
            else:
                recent.pop(h, None)
                missing.append(d)
        # A digest asked twice is reported once, in the order asked.
        if len({d.hash for d in missing}) < len(missing):
            missing = list(dict.fromkeys(missing))
        return missing

    def shard(self, folder: str) -> _Shard:
        """The bitmap of the blob names in `folder`, read on first use."""
        shard = self._shards.get(folder)
        if shard is not None:
            return shard
        # Under the lock: a blob renamed into the folder after the listdir is added by
        # its writer's `added`, which waits for the bitmap to exist.
        with self._lock:
            shard = self._shards.get(folder)
            if shard is None:
                try:
                    names = os.listdir(folder)
                except FileNotFoundError:
                    names = []
                shard = self._shards[folder] = _Shard(names)
        return shard

    def used(self, hash_hex: str, size: int, when: float) -> None:
        """Remember that the blob is present with `size`, as of `when`."""
        recent = self._recent
        recent[hash_hex] = (size, when)
        if len(recent) > self._prune_at:
            with self._lock:
                cutoff = when - self.fresh_s
                for h in [h for h, (_, t) in recent.items() if t < cutoff]:
                    recent.pop(h, None)
                self._prune_at = max(1 << 16, 2 * len(recent))

    def added(self, folder: str, hash_hex: str, size: int, when: float) -> None:
        """A blob this process just installed under `folder`."""
        with self._lock:
            shard = self._shards.get(folder)
            if shard is not None:
                shard.add(hash_hex)
                if shard.names > shard.capacity:  # too full: read again, with more bits
                    del self._shards[folder]
        self.used(hash_hex, size, when)

    def removed(self, hash_hex: str) -> None:
        """A blob this process removed: no longer remembered as present."""
        self._recent.pop(hash_hex, None)

    def bitmap_bytes(self) -> int:
        """The memory the shard bitmaps take, in bytes."""
        return sum(len(shard.bits) for shard in list(self._shards.values()))

    def forget_shards(self) -> None:
        """Read every shard again on its next lookup: after an eviction pass (which
        moves blobs aside and back without telling the index), or to see what other
        processes wrote."""
        with self._lock:
            self._shards.clear()


def _is_name(name: str) -> bool:
    if len(name) < 10:
        return False
    try:
        int(name[2:10], 16)
    except ValueError:
        return False
    return True
