"""`scrub`: re-hash every blob file of a disk store and remove those that no longer match.

Reads trust a blob file this process has already hashed as long as its inode, mtime
and size are unchanged (rbs.cas.knowngood); a change that keeps all three (a disk
flipping bits) is found only here. The scrub ignores what is remembered and hashes
every file, so it costs one read of the whole store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rbs.cas import fileio
from rbs.model import Digest, DigestFunction

if TYPE_CHECKING:
    from rbs.cas.disk import DiskStore

log = logging.getLogger(__name__)

_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScrubResult:
    """What a scrub found: files checked, how many held their digest's bytes, how many
    were removed, and the digests removed (their size as found on disk)."""

    checked: int
    ok: int
    removed: int
    corrupt: tuple[Digest, ...]


def _files(top: str) -> list[tuple[str, str]]:
    """(name, path) of every file two levels under `top` (the hash-prefix shards)."""
    out: list[tuple[str, str]] = []
    try:
        with os.scandir(top) as shards:
            shard_dirs = [s.path for s in shards if s.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return out
    for shard in shard_dirs:
        with os.scandir(shard) as files:
            out.extend((f.name, f.path) for f in files if f.is_file(follow_symlinks=False))
    return out


def _holds(path: str, function: DigestFunction, name: str) -> tuple[bool, os.stat_result]:
    """Whether the file at `path` hashes to `name`; raises FileNotFoundError if it went."""
    with open(path, "rb", buffering=0) as f:
        st = os.fstat(f.fileno())
        h, _, _ = fileio.hash_fd(f.fileno(), function)
    return h == name, st


def scrub(store: DiskStore) -> ScrubResult:
    """Hash every blob and executable twin; remove each one whose bytes do not hash to
    its name (a corrupt blob takes its twin with it; a bad twin is remade on demand)."""
    checked = ok = removed = 0
    corrupt: list[Digest] = []
    for base, is_blob in ((store.blob_dir, True), (store.exec_dir, False)):
        for fn in DigestFunction:
            for name, path in _files(str(base / fn.value)):
                if not _HASH.fullmatch(name):
                    continue  # not a blob name: nothing rbs wrote or reads
                try:
                    good, st = _holds(path, fn, name)
                except FileNotFoundError:  # evicted or replaced meanwhile
                    continue
                checked += 1
                if good:
                    ok += 1
                    if is_blob:
                        store.known.add(path, st)
                    continue
                removed += 1
                digest = Digest(function=fn, hash=name, size=st.st_size)
                if is_blob:
                    corrupt.append(digest)
                    store.quarantine(digest)
                else:
                    log.warning("removing modified executable copy %s", path)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
    return ScrubResult(checked=checked, ok=ok, removed=removed, corrupt=tuple(corrupt))
