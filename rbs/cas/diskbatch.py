"""Batched writes for the disk store: many small blobs made durable together."""

from __future__ import annotations

import contextlib
import os
import threading
from abc import abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rbs.cas import fileio, transfer
from rbs.cas.store import CHUNK, Batch, BlobStore, BlobWriter, StrPath
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction

# With syncfs a group costs one sync however many files it holds; without it, each
# file stays open until its group is fsynced, so groups must stay under the fd limit.
GROUP_SYNCFS = 4096
GROUP_FSYNC = 256
GROUP_BYTES = 256 << 20


class BatchableStore(BlobStore):
    """A blob store that writes through temp files it then installs: what a batch needs.

    rbs.cas.disk.DiskStore is the one implementation. The batch depends on this base,
    not on the disk module, so the arrow runs one way (disk uses diskbatch).
    """

    tmp_dir: Path
    durable: bool
    # Files above this size are stored with `put_file`, outside the batch.
    small_file: int

    @abstractmethod
    def new_temp(self, label: str) -> tuple[int, str]:
        """A fresh temp file (fd, path)."""

    @abstractmethod
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
        """Make a fully written temp file the blob `digest`."""

    @abstractmethod
    def os_error(self, e: OSError) -> Exception:
        """The store's error for an OSError (a full disk becomes StoreFull)."""


class DiskWriter(BlobWriter):
    """One blob streamed into a temp file of the store, installed at commit."""

    def __init__(self, store: BatchableStore, expected: Digest) -> None:
        super().__init__(expected)
        self._store = store
        self._fd: int | None
        self._fd, self._tmp = store.new_temp(expected.hash)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "write after commit or abort"
        try:
            fileio.write_all(self._fd, data)
        except OSError as e:
            self.abort()
            raise self._store.os_error(e) from e

    def _commit(self) -> None:
        assert self._fd is not None, "commit after commit or abort"
        fd, self._fd = self._fd, None
        self._store.install(fd, self._tmp, self.expected)

    def abort(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)

    def __del__(self) -> None:
        # A writer dropped without commit or abort (a client that went away) must not
        # leak its descriptor or leave its temp file until the stale-temp sweep.
        if getattr(self, "_fd", None) is not None:
            with contextlib.suppress(OSError):
                self.abort()


def make_exec_twin(store: BatchableStore, digest: Digest, twin: str) -> None:
    """Write the executable twin `twin` (0555) of a blob, from its verified bytes."""
    fd, tmp = store.new_temp("x" + digest.hash)
    try:
        with store.open(digest) as src:
            while chunk := src.read(CHUNK):
                fileio.write_all(fd, chunk)
        os.fchmod(fd, 0o555)
        if store.durable:
            os.fsync(fd)
        st = os.fstat(fd)
    except BaseException as e:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise store.os_error(e) from e
        raise
    store.install(fd, tmp, digest, synced=True, st=st, final=twin)


@dataclass(frozen=True, slots=True)
class _Pending:
    """A written temp file waiting for its group's sync (fd None: already closed)."""

    fd: int | None
    tmp: str
    digest: Digest
    st: os.stat_result


class DiskBatch(Batch):
    """Small blobs written to temp files and made durable many at a time.

    Temp files are made durable together and only then renamed to their blob names,
    so the crash guarantee of single writes holds (never a partial blob under a real
    name) while the device sees one sync per group instead of one per blob. On Linux a
    group is synced with syncfs(2) on the store's file system (which also flushes
    whatever else is dirty there); elsewhere its files are fsynced from a thread pool.
    Blobs become visible group by group, and all of them by the time `commit` returns.
    Puts may come from several threads at once.
    """

    def __init__(self, store: BatchableStore) -> None:
        super().__init__(store)
        self._disk = store
        self._syncfs = fileio.HAVE_SYNCFS
        self._group = GROUP_SYNCFS if self._syncfs else GROUP_FSYNC
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._pending_bytes = 0
        self._seen: set[Digest] = set()
        self._pool: ThreadPoolExecutor | None = None

    def put(self, data: bytes, *, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        digest = Digest.of(data, function)
        if digest.size == 0:
            return digest
        with self._lock:
            if digest in self._seen:
                return digest
            self._seen.add(digest)
        if self._disk.contains(digest):
            return digest
        fd, tmp = self._disk.new_temp(digest.hash)
        try:
            fileio.write_all(fd, data)
            st = os.fstat(fd)
        except OSError as e:
            os.close(fd)
            os.unlink(tmp)
            self.abort()
            raise self._disk.os_error(e) from e
        if self._syncfs:
            os.close(fd)
            entry = _Pending(None, tmp, digest, st)
        else:
            entry = _Pending(fd, tmp, digest, st)
        with self._lock:
            self._pending.append(entry)
            self._pending_bytes += len(data)
            full = len(self._pending) >= self._group or self._pending_bytes >= GROUP_BYTES
        if full:
            self.flush()
        return digest

    def put_file(self, path: StrPath, *, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        with open(path, "rb", buffering=0) as f:
            if os.fstat(f.fileno()).st_size > self._disk.small_file:
                return self._disk.put_file(Path(path), function=function)
            data = f.read()
        transfer.advance(len(data))  # a big file's copy reports as it goes
        return self.put(data, function=function)

    def flush(self) -> None:
        """Make the pending blobs durable, then visible."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._pending_bytes = 0
        if not pending:
            return
        try:
            if self._disk.durable:
                self._sync(pending)
        except OSError as e:
            self._discard(pending)
            raise self._disk.os_error(e) from e
        # Renames are independent and mostly wait on the file system: run them side by side.
        errors = [e for e in self._map(self._install, pending) if e is not None]
        if errors:
            raise errors[0]

    def _install(self, p: _Pending) -> BaseException | None:
        try:
            self._disk.install(p.fd, p.tmp, p.digest, synced=True, st=p.st)
        except BaseException as e:  # install removed the temp file; report after the rest
            return e
        return None

    def _map(
        self, fn: Callable[[_Pending], BaseException | None], items: list[_Pending]
    ) -> list[BaseException | None]:
        if len(items) < 16:
            return [fn(p) for p in items]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(fileio.FSYNC_THREADS)
            pool = self._pool
        return fileio.map_in_slices(pool, fn, items, fileio.FSYNC_THREADS)

    def _sync(self, pending: list[_Pending]) -> None:
        if self._syncfs:
            fileio.syncfs(str(self._disk.tmp_dir))
            return

        def fsync(p: _Pending) -> BaseException | None:
            assert p.fd is not None
            os.fsync(p.fd)
            return None

        self._map(fsync, pending)

    def commit(self) -> None:
        try:
            self.flush()
        finally:
            self._close_pool()

    def abort(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        self._discard(pending)
        self._close_pool()

    def _discard(self, pending: list[_Pending]) -> None:
        for p in pending:
            if p.fd is not None:
                os.close(p.fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p.tmp)

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
