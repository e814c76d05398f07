"""The on-disk blob store: sharded by hash prefix, crash-safe writes, verified reads.

Layout under the store root:

    blobs/<function>/<hh>/<hash>    read-only blob files (mode 0444)
    exec/<function>/<hh>/<hash>     executable twins (0555), made on demand for hardlinking
    tmp/                            uploads in progress; never read as blobs

A write goes to a unique temp file in tmp/, is fsynced, then renamed over its final
name. Rename is atomic, so a reader sees either no blob or the whole blob, and several
processes writing the same blob at once simply replace identical bytes. A crash leaves
at most a stray temp file, which `gc` removes once it is old.

Reads verify before the first byte: `open` hashes the whole blob file unless this
process already found it good with the same inode, mtime and size (rbs.cas.knowngood),
and a mismatch removes the blob, so no reader at any offset ever gets a corrupt byte.
The same check runs before a blob is hardlinked out (a job running as root can write
through a hardlink). `rbs cas verify` (rbs.cas.scrub) re-hashes every blob regardless.

A blob's mtime is its last use. Every lookup that finds a blob (`contains`,
`find_missing`, `open`, `export_file`) sets it to now, at most once a minute per blob
so the hot path stays a stat(); `gc` evicts least recently used blobs first and never
one used within the lease. Because the state is the file system itself, the lease
holds across every process sharing the store directory.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, cast

from rbs.cas import eviction, fileio, presence, transfer
from rbs.cas.diskbatch import BatchableStore, DiskBatch, DiskWriter, make_exec_twin
from rbs.cas.diskverify import VerifiedReads
from rbs.cas.errors import BlobNotFound, DigestMismatch, StoreFull
from rbs.cas.eviction import TOUCH_INTERVAL
from rbs.cas.knowngood import KnownGood
from rbs.cas.presence import PresenceIndex
from rbs.cas.store import CHUNK, Batch, BlobWriter
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction

log = logging.getLogger(__name__)

DEFAULT_LEASE = 3 * 3600.0
# Files up to this size are read whole and hashed before anything is written.
SMALL_FILE = 4 << 20
_counter = itertools.count()


class DiskStore(VerifiedReads, BatchableStore):
    """Blobs as files under `root`; see the module docstring for layout and guarantees.

    `max_size` bounds the store: when a write takes it over, least recently used blobs
    outside the lease are evicted down to 90% of it. `durable=False` skips fsync (for
    scratch stores whose loss on a crash does not matter). `index=True`: `find_missing`
    answers from memory (rbs.cas.presence), for a store that one process owns; `close`
    stops its threads.
    """

    def __init__(
        self,
        root: Path,
        *,
        max_size: int | None = None,
        lease: float = DEFAULT_LEASE,
        durable: bool = True,
        index: bool = False,
    ) -> None:
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be a size in bytes >= 0, not {max_size}")
        if lease < 0:
            raise ValueError(f"lease must be a number of seconds >= 0, not {lease}")
        self.root = Path(root).absolute()
        self.blob_dir = self.root / "blobs"
        self.exec_dir = self.root / "exec"
        self.tmp_dir = self.root / "tmp"
        self.max_size = max_size
        self.lease = lease
        self.durable = durable
        self.small_file = SMALL_FILE
        try:
            for d in (self.blob_dir, self.exec_dir, self.tmp_dir):
                d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self.os_error(e) from e
        # String paths: pathlib costs microseconds per join, which find_missing feels.
        self._blob_prefix = {f: f"{self.blob_dir}/{f.value}/" for f in DigestFunction}
        self._exec_prefix = {f: f"{self.exec_dir}/{f.value}/" for f in DigestFunction}
        self._tmp_prefix = f"{self.tmp_dir}/"
        self._made_dirs: set[str] = set()
        self.known = KnownGood()
        self._lock = threading.Lock()
        self._gc_lock = threading.Lock()
        self._approx_size: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        fresh = min(TOUCH_INTERVAL, lease)
        self.index = (
            PresenceIndex(str(self.root), self._blob_prefix, self._touch_path, fresh_s=fresh)
            if index
            else None
        )
        self._journal = presence.Journal(str(self.root))  # used without an index

    def close(self) -> None:
        """Stop the index's threads (a store without an index holds none)."""
        if self.index is not None:
            self.index.close()

    # Paths and errors.

    def path_of(self, digest: Digest) -> Path:
        return Path(self._path(digest))

    def _path(self, digest: Digest) -> str:
        h = digest.hash
        return f"{self._blob_prefix[digest.function]}{h[:2]}/{h}"

    def _exec_path(self, digest: Digest) -> str:
        h = digest.hash
        return f"{self._exec_prefix[digest.function]}{h[:2]}/{h}"

    def os_error(self, e: OSError) -> Exception:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreFull(self.root, os.strerror(e.errno))
        return e

    def _ensure_parent(self, path: str) -> None:
        if (parent := path.rpartition("/")[0]) not in self._made_dirs:
            os.makedirs(parent, exist_ok=True)
            self._made_dirs.add(parent)

    # Writing.

    def new_temp(self, label: str) -> tuple[int, str]:
        """A fresh temp file (fd, path) in tmp/; mode 0444 from the start."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        while True:
            tmp = f"{self._tmp_prefix}{label[:16]}.{os.getpid()}.{next(_counter)}"
            try:
                return os.open(tmp, flags, 0o444), tmp
            except FileExistsError:  # left by a crashed process that had our pid
                continue
            except OSError as e:
                raise self.os_error(e) from e

    def install(
        self,
        fd: int | None,
        tmp: str,
        digest: Digest,
        *,
        synced: bool = False,
        st: os.stat_result | None = None,
        final: str | None = None,
    ) -> None:
        """Make a fully written temp file the blob `digest`: fsync, close, rename (`fd`
        None: already closed, and `synced` says it is durable).

        On any error the temp file is removed, so nothing partial is left behind.
        `final` overrides the destination (an executable twin)."""
        final = final or self._path(digest)
        try:
            if fd is not None:
                try:
                    if self.durable and not synced:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            self._ensure_parent(final)
            os.rename(tmp, final)
        except OSError as e:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise self.os_error(e) from e
        if final == self._path(digest):
            if self.index is not None:
                self.index.added(digest.function, digest.hash, digest.size, time.time())
            else:  # for an index another process holds on this store, if any
                self._journal.added(digest.function, digest.hash, digest.size)
        # The bytes were hashed on their way in: no need to hash them again to serve them.
        with contextlib.suppress(OSError):
            self.known.add(final, st or os.stat(final))
        self._added(digest.size)

    def writer(self, expected: Digest) -> BlobWriter:
        return DiskWriter(self, expected)

    def batch(self) -> Batch:
        return DiskBatch(self)

    def put_file(
        self,
        path: Path,
        *,
        function: DigestFunction = DEFAULT_FUNCTION,
        expected: Digest | None = None,
    ) -> Digest:
        """Store a file in one pass: copied to a temp file while hashed, in constant memory."""
        if expected is not None:
            function = expected.function
            if expected.size == 0 or self.contains(expected):
                size = os.path.getsize(path)
                if size != expected.size:
                    h, size = fileio.hash_path(str(path), function)
                    raise DigestMismatch(expected, Digest(function=function, hash=h, size=size))
                return expected
        with open(path, "rb", buffering=0) as src:
            if os.fstat(src.fileno()).st_size <= SMALL_FILE:
                transfer.advance(os.fstat(src.fileno()).st_size)  # a big one: per chunk
                return self.put(src.read(), function=function, expected=expected)
            fd, tmp = self.new_temp(expected.hash if expected else "file")
            try:
                hasher = function.hasher()
                size = fileio.copy_hashing(src, fd, hasher, self._hash_pool())
            except BaseException as e:
                os.close(fd)
                os.unlink(tmp)
                if isinstance(e, OSError):
                    raise self.os_error(e) from e
                raise
        digest = Digest(function=function, hash=hasher.hexdigest(), size=size)
        if expected is not None and digest != expected:
            os.close(fd)
            os.unlink(tmp)
            raise DigestMismatch(expected, digest)
        if digest.size == 0 or (expected is None and self.contains(digest)):
            os.close(fd)
            os.unlink(tmp)
            return digest
        self.install(fd, tmp, digest)
        return digest

    def _hash_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(2, thread_name_prefix="rbs-cas-hash")
            return self._pool

    # Lookups; each one that finds a blob counts as a use (see the module docstring).

    def contains(self, digest: Digest) -> bool:
        if digest.size == 0:
            return True
        return self._present(self._path(digest), digest)

    def _present(self, path: str, digest: Digest) -> bool:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if self.index is not None:  # removed behind the store's back
                self.index.removed(digest.function, digest.hash)
            return False
        if st.st_size != digest.size:
            self._other_size(path, digest)
            return False
        st = self._touch(path, st)
        if self.index is not None:
            self.index.added(digest.function, digest.hash, digest.size, st.st_mtime)
        return True

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        if self.index is not None and self.index.ready.is_set():
            return self.index.find_missing(digests)
        return self.check_missing(digests)

    def check_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        """`find_missing` by a stat of each blob, whatever the index holds: for an
        answer a client acts on at once without a fallback (an action-cache hit)."""
        # The hot path without an index: one stat() per digest, no pathlib, and a
        # touch only for blobs whose last recorded use is over a minute old.
        seen: set[Digest] = set()
        missing = []
        stale_before = time.time() - TOUCH_INTERVAL
        prefixes, index = self._blob_prefix, self.index
        for d in digests:
            if d.size == 0 or d in seen:
                continue
            seen.add(d)
            h = d.hash
            path = f"{prefixes[d.function]}{h[:2]}/{h}"
            try:
                st = os.stat(path)
            except FileNotFoundError:
                missing.append(d)
                if index is not None:
                    index.removed(d.function, h)
                continue
            if st.st_size != d.size:
                self._other_size(path, d)
                missing.append(d)
                continue
            if st.st_mtime < stale_before:
                st = self._touch(path, st)
            if index is not None:
                index.added(d.function, h, d.size, st.st_mtime)
        return missing

    def _touch_path(self, path: str) -> None:
        """A use the index recorded, put on disk (from its touch thread)."""
        with contextlib.suppress(FileNotFoundError):
            self._touch(path, os.stat(path))

    def _touch(self, path: str, st: os.stat_result) -> os.stat_result:
        now = time.time()
        if st.st_mtime >= now - TOUCH_INTERVAL:
            return st
        try:
            os.utime(path, (now, now))
            after = os.stat(path)
        except FileNotFoundError:  # evicted meanwhile: the next lookup reports it missing
            return st
        except PermissionError:  # a store shared read-only: the lease cannot be recorded
            return st
        self.known.retouched(path, st, after)
        return after

    def _open(self, digest: Digest) -> BinaryIO:
        path = self._path(digest)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by the returned reader)
        except FileNotFoundError:
            if self.index is not None:
                self.index.removed(digest.function, digest.hash)
            raise BlobNotFound(digest) from None
        try:
            data = self._verify_open(f, path, digest)
        except BaseException:
            f.close()
            raise
        if data is not None:
            f.close()
            return io.BytesIO(data)
        return cast(BinaryIO, io.BufferedReader(f, CHUNK))

    def export_file(
        self, digest: Digest, dest: Path, *, executable: bool = False, link: bool = True
    ) -> None:
        if not link or digest.size == 0:
            super().export_file(digest, dest, executable=executable, link=False)
            return
        # Two tries: an eviction or a tampered executable twin between check and link
        # is repaired once (the twin is remade from the verified blob).
        for _ in range(2):
            src = self._exec_path(digest) if executable else self._path(digest)
            if not self._check_file(src, digest):
                if not executable:
                    raise BlobNotFound(digest)
                make_exec_twin(self, digest, src)
            try:
                os.link(src, dest)
                transfer.advance(digest.size)  # a copy (super's) reports as it goes
                return
            except FileNotFoundError:
                if not os.path.isdir(os.path.dirname(os.path.abspath(dest))):
                    raise
                continue
            except OSError as e:
                if e.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM):
                    raise
                break
        super().export_file(digest, dest, executable=executable, link=False)

    # Removal and eviction.

    def delete(self, digest: Digest) -> bool:
        # Out of the index (or the journal of another process's) first: a lookup
        # meanwhile reports it missing, never present once it is going.
        self.evicting(digest.function, digest.hash, None)
        removed = False
        for p in (self._path(digest), self._exec_path(digest)):
            self.known.forget(p)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
                removed = True
        self.evicted(digest.function, digest.hash, removed=True)
        return removed

    def evicting(self, fn: DigestFunction, name: str, lease_from: float | None) -> bool:
        """Before a blob is moved aside or removed: False keeps it (the index saw it used
        at or after `lease_from`); see rbs.cas.presence."""
        if self.index is not None:  # a lease of 0 promises nothing
            return self.index.hide(fn, name, lease_from if self.lease > 0 else None)
        self._journal.removing(fn, name)
        return True

    def evicted(self, fn: DigestFunction, name: str, *, removed: bool) -> None:
        if self.index is not None:
            self.index.unhide(fn, name, removed)

    def quarantine(self, digest: Digest) -> None:
        log.error("removing corrupt blob %s from %s", digest, self.root)
        self.delete(digest)

    def _added(self, size: int) -> None:
        if self.max_size is None:
            return
        with self._lock:
            if self._approx_size is None:
                self._approx_size = eviction.stat(self).total_bytes
            self._approx_size += size
            over = self._approx_size > self.max_size
        # One eviction pass at a time; writers that find one running just carry on.
        if over and self._gc_lock.acquire(blocking=False):
            try:
                result = self.gc(target=self.max_size * 9 // 10)
            except OSError as e:  # eviction is best effort; the write itself succeeded
                log.warning("automatic gc of %s failed: %s", self.root, e)
                return
            finally:
                self._gc_lock.release()
            with self._lock:
                self._approx_size = result.after_bytes

    def gc(self, max_size: int | None = None, *, target: int | None = None) -> eviction.GcResult:
        """Evict LRU blobs outside the lease until the store holds at most `target`
        bytes (default: `max_size`, default the store's bound)."""
        bound = max_size if max_size is not None else self.max_size
        if self.index is not None:
            self.index.flush_touches()  # the uses it recorded, on disk for the LRU order
        return eviction.collect(self, bound if target is None else target)

    def stat(self) -> eviction.StoreStats:
        return eviction.stat(self)  # counts and sizes of what the store holds

    def sweep_tmp(self, older_than: float = eviction.STALE_TMP) -> int:
        """Remove temp files older than `older_than` seconds (uploads left by a crashed
        writer; a live upload is younger than any sensible age); returns how many."""
        return eviction.sweep_tmp(self, older_than)
