"""A local store in front of a remote one: what a worker uses over the server's CAS.

Reads try the local store first; a miss fetches the blob from the remote store, keeps
a local copy (verified on the way in) and serves that. Writes go to the local store
and then through to the remote one, so a blob written here is visible to every other
client once the put returns. `find_missing` asks the remote store only about what
the local store lacks, which saves a round trip per present blob.

`remote_functions` limits the remote level to blobs of those digest functions: a
build that keeps BLAKE3 locally in front of a SHA256-only server stores its BLAKE3
blobs locally only (rbs.cas.bridge gives them SHA256 twins that do go through).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from rbs.cas.errors import BlobNotFound
from rbs.cas.store import CHUNK, Batch, BlobStore, BlobWriter, StrPath
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction


class _WriteThrough(BlobWriter):
    """Writes into the local store; after the local commit, copies to the remote."""

    def __init__(self, store: TwoLevelStore, expected: Digest) -> None:
        super().__init__(expected)
        self._store = store
        self._local = store.local.writer(expected)

    def _write(self, data: bytes) -> None:
        self._local.write(data)

    def _commit(self) -> None:
        self._local.commit()
        self._store.push([self.expected])

    def abort(self) -> None:
        self._local.abort()


class _TwoLevelBatch(Batch):
    """A local batch; on commit, one find_missing to the remote, then the uploads."""

    def __init__(self, store: TwoLevelStore) -> None:
        super().__init__(store)
        self._two = store
        self._local = store.local.batch()
        self._digests: list[Digest] = []

    def put(self, data: bytes, *, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        d = self._local.put(data, function=function)
        self._digests.append(d)
        return d

    def put_file(self, path: StrPath, *, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        d = self._local.put_file(path, function=function)
        self._digests.append(d)
        return d

    def commit(self) -> None:
        self._local.commit()
        self._two.push(self._digests)
        self._digests = []

    def abort(self) -> None:
        self._local.abort()
        self._digests = []


class TwoLevelStore(BlobStore):
    """`local` (fast, bounded, e.g. a DiskStore) caching `remote` (authoritative)."""

    def __init__(
        self,
        local: BlobStore,
        remote: BlobStore,
        *,
        remote_functions: Iterable[DigestFunction] | None = None,
    ) -> None:
        self.local = local
        self.remote = remote
        self.remote_functions = frozenset(remote_functions) if remote_functions else None

    def _remote_ok(self, digest: Digest) -> bool:
        return self.remote_functions is None or digest.function in self.remote_functions

    def contains(self, digest: Digest) -> bool:
        return self.local.contains(digest) or (
            self._remote_ok(digest) and self.remote.contains(digest)
        )

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        not_local = self.local.find_missing(digests)
        if not not_local:
            return []
        ask = [d for d in not_local if self._remote_ok(d)]
        absent = set(self.remote.find_missing(ask)) if ask else set()
        return [d for d in not_local if d in absent or not self._remote_ok(d)]

    def writer(self, expected: Digest) -> BlobWriter:
        return _WriteThrough(self, expected)

    def batch(self) -> Batch:
        return _TwoLevelBatch(self)

    def put(
        self,
        data: bytes,
        *,
        function: DigestFunction = DEFAULT_FUNCTION,
        expected: Digest | None = None,
    ) -> Digest:
        d = self.local.put(data, function=function, expected=expected)
        if self._remote_ok(d) and self.remote.find_missing([d]):
            self.remote.put(data, expected=d)
        return d

    def put_file(
        self,
        path: Path,
        *,
        function: DigestFunction = DEFAULT_FUNCTION,
        expected: Digest | None = None,
    ) -> Digest:
        d = self.local.put_file(path, function=function, expected=expected)
        self.push([d])
        return d

    def push(self, digests: Iterable[Digest]) -> None:
        """Upload to the remote store whichever of `digests` it lacks, from local copies."""
        for d in self.remote.find_missing([d for d in digests if self._remote_ok(d)]):
            with self.local.open(d) as src, self.remote.writer(d) as w:
                while chunk := src.read(CHUNK):
                    w.write(chunk)
                w.commit()

    def fetch(self, digest: Digest) -> None:
        """Make sure the local store holds `digest`, copying it from the remote store."""
        if self.local.contains(digest):
            return
        if not self._remote_ok(digest):
            raise BlobNotFound(digest)
        with self.remote.open(digest) as src, self.local.writer(digest) as w:
            while chunk := src.read(CHUNK):
                w.write(chunk)
            w.commit()

    def _open(self, digest: Digest) -> BinaryIO:
        try:
            return self.local.open(digest)
        except BlobNotFound:
            self.fetch(digest)
            return self.local.open(digest)

    def delete(self, digest: Digest) -> bool:
        local = self.local.delete(digest)
        remote = self.remote.delete(digest)
        return local or remote

    def export_file(
        self, digest: Digest, dest: Path, *, executable: bool = False, link: bool = True
    ) -> None:
        if digest.size:
            self.fetch(digest)
        self.local.export_file(digest, dest, executable=executable, link=link)
