"""An in-memory blob store: for tests and short-lived client caches."""

from __future__ import annotations

import io
import threading
from typing import BinaryIO

from rbs.cas.errors import BlobNotFound
from rbs.cas.store import BlobStore, BlobWriter
from rbs.model import Digest


class _MemoryWriter(BlobWriter):
    def __init__(self, store: MemoryStore, expected: Digest) -> None:
        super().__init__(expected)
        self._store = store
        self._buf = bytearray()

    def _write(self, data: bytes) -> None:
        self._buf += data

    def _commit(self) -> None:
        with self._store._lock:
            self._store._blobs[self.expected] = bytes(self._buf)

    def abort(self) -> None:
        self._buf = bytearray()


class MemoryStore(BlobStore):
    def __init__(self) -> None:
        self._blobs: dict[Digest, bytes] = {}
        self._lock = threading.Lock()

    def contains(self, digest: Digest) -> bool:
        return digest.size == 0 or digest in self._blobs

    def writer(self, expected: Digest) -> BlobWriter:
        return _MemoryWriter(self, expected)

    def _open(self, digest: Digest) -> BinaryIO:
        try:
            return io.BytesIO(self._blobs[digest])
        except KeyError:
            raise BlobNotFound(digest) from None

    def delete(self, digest: Digest) -> bool:
        with self._lock:
            return self._blobs.pop(digest, None) is not None

    def __len__(self) -> int:
        return len(self._blobs)
