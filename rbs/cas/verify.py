"""A store wrapper that checks every byte it serves against its digest.

Put it over a store whose bytes it does not trust (a remote one, a shared cache).
A blob that fails the check is deleted from the inner store and reported as
`CorruptBlob`, so it is never served twice and `find_missing` reports it missing.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO, cast

from rbs.cas.errors import CorruptBlob
from rbs.cas.store import CHUNK, BlobStore, BlobWriter, hash_file
from rbs.model import Digest


class VerifyingReader(io.RawIOBase):
    """Hashes a blob as it is read sequentially; at EOF a mismatch calls `on_corrupt`
    (which removes the blob) and raises the error it returns."""

    def __init__(self, digest: Digest, f: BinaryIO, on_corrupt: Callable[[], Exception]) -> None:
        super().__init__()
        self._digest = digest
        self._f = f
        self._on_corrupt = on_corrupt
        self._hasher = digest.function.hasher()
        self._pos = 0
        self._verifying = True

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._f.seekable()

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        n: int
        if hasattr(self._f, "readinto"):
            n = self._f.readinto(view)
        else:
            data = self._f.read(len(view))
            n = len(data)
            view[:n] = data
        if self._verifying:
            self._hasher.update(cast(bytes, view[:n]))
            self._pos += n
            if n == 0 or self._pos >= self._digest.size:
                self._finish()
        return n

    def _finish(self) -> None:
        self._verifying = False
        extra = self._f.read(1) if self._pos == self._digest.size else b""
        if extra or self._pos != self._digest.size or self._hasher.hexdigest() != self._digest.hash:
            raise self._on_corrupt()

    def seek(self, offset: int, whence: int = 0) -> int:
        # Random access cannot be verified as it goes; such reads rely on the inner
        # store's own check (the disk store hashes a whole blob before serving any of it).
        self._verifying = False
        return self._f.seek(offset, whence)

    def tell(self) -> int:
        return self._f.tell()

    def close(self) -> None:
        self._f.close()
        super().close()


def verifying_reader(digest: Digest, f: BinaryIO, on_corrupt: Callable[[], Exception]) -> BinaryIO:
    return cast(BinaryIO, io.BufferedReader(VerifyingReader(digest, f, on_corrupt), CHUNK))


class _ForwardingWriter(BlobWriter):
    """Hashes what passes through (the base class checks it at commit) and forwards
    the bytes to the inner store's writer, which commits only after the check."""

    def __init__(self, inner: BlobWriter) -> None:
        super().__init__(inner.expected)
        self._inner = inner

    def _write(self, data: bytes) -> None:
        self._inner.write(data)

    def _commit(self) -> None:
        self._inner.commit()

    def abort(self) -> None:
        self._inner.abort()


class VerifyingStore(BlobStore):
    """Wraps `inner`; reads, writes and exports are all checked against digests."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner

    def contains(self, digest: Digest) -> bool:
        return self.inner.contains(digest)

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        return self.inner.find_missing(digests)

    def writer(self, expected: Digest) -> BlobWriter:
        return _ForwardingWriter(self.inner.writer(expected))

    def _open(self, digest: Digest) -> BinaryIO:
        return verifying_reader(digest, self.inner.open(digest), lambda: self._corrupt(digest))

    def _corrupt(self, digest: Digest) -> Exception:
        self.inner.delete(digest)
        return CorruptBlob(digest)

    def delete(self, digest: Digest) -> bool:
        return self.inner.delete(digest)

    def export_file(
        self, digest: Digest, dest: Path, *, executable: bool = False, link: bool = True
    ) -> None:
        # Let the inner store link or copy as it can, then check what landed.
        self.inner.export_file(digest, dest, executable=executable, link=link)
        if hash_file(dest, digest.function) != digest:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)
            raise self._corrupt(digest)
