"""The on-disk blob store: sharded by hash prefix, crash-safe writes, verified reads.

Layout under the store root:

    blobs/<function>/<hh>/<hash>    read-only blob files (mode 0444)
    exec/<function>/<hh>/<hash>     executable twins (0555), made on demand for hardlinking
    tmp/                            uploads in progress; never read as blobs

A write goes to a unique temp file in tmp/, is fsynced, then renamed over its final
name. Rename is atomic, so a reader sees either no blob or the whole blob, and several
processes writing the same blob at once simply replace identical bytes. A crash leaves
at most a stray temp file, which `sweep_tmp` removes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, cast

from rbs.cas.errors import BlobNotFound, CorruptBlob, StoreFull
from rbs.cas.store import CHUNK, BlobStore, BlobWriter
from rbs.model import Digest

log = logging.getLogger(__name__)


class _DiskWriter(BlobWriter):
    def __init__(self, store: DiskStore, expected: Digest) -> None:
        super().__init__(expected)
        self._store = store
        try:
            fd, name = tempfile.mkstemp(dir=store.tmp_dir, prefix=expected.hash[:16] + ".")
        except OSError as e:
            raise store.os_error(e) from e
        self._tmp = Path(name)
        self._file: BinaryIO | None = os.fdopen(fd, "wb", buffering=0)

    def _write(self, data: bytes) -> None:
        assert self._file is not None, "write after commit or abort"
        try:
            self._file.write(data)
        except OSError as e:
            self.abort()
            raise self._store.os_error(e) from e

    def _commit(self) -> None:
        assert self._file is not None, "commit after commit or abort"
        final = self._store.path_of(self.expected)
        try:
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            os.chmod(self._tmp, 0o444)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._tmp, final)
        except OSError as e:
            self.abort()
            raise self._store.os_error(e) from e
        self._store.on_committed(self.expected)

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()


class _VerifyingReader(io.RawIOBase):
    """Hashes a blob as it is read sequentially; at EOF a mismatch removes the blob."""

    def __init__(self, store: DiskStore, digest: Digest, f: BinaryIO) -> None:
        super().__init__()
        self._store = store
        self._digest = digest
        self._f = f
        self._hasher = digest.function.hasher()
        self._pos = 0
        self._verifying = True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n: int = self._f.readinto(b)  # type: ignore[attr-defined]
        if self._verifying:
            self._hasher.update(bytes(memoryview(b)[:n]))
            self._pos += n
            if n == 0 or self._pos >= self._digest.size:
                self._finish()
        return n

    def _finish(self) -> None:
        self._verifying = False
        if self._pos != self._digest.size or self._hasher.hexdigest() != self._digest.hash:
            self._store.quarantine(self._digest)
            raise CorruptBlob(self._digest, self._store.path_of(self._digest))

    def seek(self, offset: int, whence: int = 0) -> int:
        # Random access cannot be verified as it goes; the blob was checked when written.
        self._verifying = False
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()
        super().close()

    def fileno(self) -> int:
        return self._f.fileno()


class DiskStore(BlobStore):
    """Blobs as files under `root`; see the module docstring for the layout."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.blob_dir = self.root / "blobs"
        self.exec_dir = self.root / "exec"
        self.tmp_dir = self.root / "tmp"
        for d in (self.blob_dir, self.exec_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)

    def path_of(self, digest: Digest) -> Path:
        h = digest.hash
        return self.blob_dir / digest.function.value / h[:2] / h

    def _exec_path_of(self, digest: Digest) -> Path:
        h = digest.hash
        return self.exec_dir / digest.function.value / h[:2] / h

    def os_error(self, e: OSError) -> Exception:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return StoreFull(self.root, str(e))
        return e

    def on_committed(self, digest: Digest) -> None:
        """Hook for subclasses that keep an index (eviction)."""

    def on_accessed(self, digest: Digest) -> None:
        """Hook for subclasses that track use (eviction leases)."""

    def contains(self, digest: Digest) -> bool:
        if digest.size == 0:
            return True
        try:
            st = os.stat(self.path_of(digest))
        except FileNotFoundError:
            return False
        if st.st_size != digest.size:
            self.quarantine(digest)
            return False
        return True

    def writer(self, expected: Digest) -> BlobWriter:
        return _DiskWriter(self, expected)

    def _open(self, digest: Digest) -> BinaryIO:
        path = self.path_of(digest)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed by the returned reader)
        except FileNotFoundError:
            raise BlobNotFound(digest) from None
        if os.fstat(f.fileno()).st_size != digest.size:
            f.close()
            self.quarantine(digest)
            raise CorruptBlob(digest, path)
        self.on_accessed(digest)
        return cast(BinaryIO, io.BufferedReader(_VerifyingReader(self, digest, f), CHUNK))

    def delete(self, digest: Digest) -> bool:
        removed = False
        for p in (self.path_of(digest), self._exec_path_of(digest)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed = True
        return removed

    def quarantine(self, digest: Digest) -> None:
        log.error("removing corrupt blob %s from %s", digest, self.root)
        self.delete(digest)

    def export_file(
        self, digest: Digest, dest: Path, *, executable: bool = False, link: bool = True
    ) -> None:
        if not link or digest.size == 0:
            super().export_file(digest, dest, executable=executable, link=False)
            return
        src = self._exec_path_of(digest) if executable else self.path_of(digest)
        if executable and not src.exists():
            self._make_exec_twin(digest, src)
        try:
            os.link(src, dest)
        except FileNotFoundError:
            raise BlobNotFound(digest) from None
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EMLINK, errno.EPERM):
                raise
            super().export_file(digest, dest, executable=executable, link=False)
            return
        self.on_accessed(digest)

    def _make_exec_twin(self, digest: Digest, twin: Path) -> None:
        twin.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=self.tmp_dir, prefix="x.")
        try:
            with os.fdopen(fd, "wb") as out, self.open(digest) as src:
                shutil.copyfileobj(src, out, CHUNK)
            os.chmod(name, 0o555)
            os.replace(name, twin)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise

    def sweep_tmp(self) -> int:
        """Remove uploads left behind by a crashed writer; returns how many."""
        n = 0
        for p in self.tmp_dir.iterdir():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                n += 1
        return n
