"""The blob-store interface that every backend and wrapper implements.

Backends (disk, memory) keep bytes; wrappers (verifying, two-level) stack on top.
Blobs are keyed by `Digest`, which names its hash function, so one store can hold
BLAKE3 and SHA256 blobs side by side. The empty blob is always present.
"""

from __future__ import annotations

import contextlib
import errno
import io
import itertools
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

from rbs.cas import transfer
from rbs.cas.errors import BlobNotFound, DigestMismatch
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction

CHUNK = 1 << 20
_tmp_names = itertools.count()
StrPath = str | os.PathLike[str]


class Message(Protocol):
    """The part of a protobuf message that the store needs."""

    def SerializeToString(self, *, deterministic: bool = ...) -> bytes: ...
    def ParseFromString(self, data: bytes, /) -> int: ...


M = TypeVar("M", bound=Message)


class BlobWriter(ABC):
    """An upload in progress: write chunks, then commit (verifies) or abort."""

    def __init__(self, expected: Digest) -> None:
        self.expected = expected
        self.written = 0
        self._hasher = expected.function.hasher()

    def write(self, data: bytes) -> None:
        if self.written + len(data) > self.expected.size:
            self._hasher.update(data)
            self.written += len(data)
            self.abort()
            raise DigestMismatch(self.expected, self.actual(), truncated=True)
        self._hasher.update(data)
        self.written += len(data)
        self._write(data)

    def actual(self) -> Digest:
        return Digest(
            function=self.expected.function, hash=self._hasher.hexdigest(), size=self.written
        )

    def commit(self) -> Digest:
        actual = self.actual()
        if actual != self.expected:
            self.abort()
            raise DigestMismatch(self.expected, actual)
        self._commit()
        return actual

    @abstractmethod
    def _write(self, data: bytes) -> None: ...

    @abstractmethod
    def _commit(self) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.abort()


class Batch:
    """Many puts made durable together; blobs become visible when the batch commits.

    Used as a context manager: leaving the block normally commits every blob, an
    exception discards them. This default forwards each put to the store at once;
    the disk store overrides it to pay for durability once per batch, not per blob.
    """

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    def put(self, data: bytes, *, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        return self.store.put(data, function=function)

    def put_file(self, path: StrPath, *, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        return self.store.put_file(Path(path), function=function)

    def put_message(self, msg: Message, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        return self.put(msg.SerializeToString(deterministic=True), function=function)

    def commit(self) -> None:
        """Make every blob of the batch durable and visible."""

    def abort(self) -> None:
        """Discard what the batch has not committed."""

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class BlobStore(ABC):
    """Content-addressed blobs. Subclasses implement the abstract methods."""

    @abstractmethod
    def contains(self, digest: Digest) -> bool: ...

    @abstractmethod
    def writer(self, expected: Digest) -> BlobWriter: ...

    @abstractmethod
    def _open(self, digest: Digest) -> BinaryIO:
        """Open a present, non-empty blob for reading (verification is the caller's)."""

    @abstractmethod
    def delete(self, digest: Digest) -> bool: ...

    # Derived operations; backends override them where they can do better.

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        seen: set[Digest] = set()
        missing = []
        for d in digests:
            if d in seen:
                continue
            seen.add(d)
            if d.size and not self.contains(d):
                missing.append(d)
        return missing

    def check_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        """`find_missing` checked at the source, for an answer a client acts on with no
        fallback (an action-cache hit); a store with an index looks past it."""
        return self.find_missing(digests)

    def open(self, digest: Digest) -> BinaryIO:
        if digest.size == 0:
            return io.BytesIO(b"")
        return self._open(digest)

    def get(self, digest: Digest) -> bytes:
        with self.open(digest) as f:
            return f.read()

    def put(
        self,
        data: bytes,
        *,
        function: DigestFunction = DEFAULT_FUNCTION,
        expected: Digest | None = None,
    ) -> Digest:
        digest = Digest.of(data, expected.function if expected else function)
        if expected is not None and digest != expected:
            raise DigestMismatch(expected, digest)
        if digest.size and not self.contains(digest):
            with self.writer(digest) as w:
                w.write(data)
                w.commit()
        return digest

    def put_file(
        self,
        path: Path,
        *,
        function: DigestFunction = DEFAULT_FUNCTION,
        expected: Digest | None = None,
    ) -> Digest:
        digest = expected or hash_file(path, function)
        if digest.size and not self.contains(digest):
            with self.writer(digest) as w, open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    w.write(chunk)
                w.commit()
        elif expected is not None and os.path.getsize(path) != expected.size:
            raise DigestMismatch(expected, hash_file(path, expected.function))
        return digest

    def put_message(self, msg: Message, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        return self.put(msg.SerializeToString(deterministic=True), function=function)

    def batch(self) -> Batch:
        """A batch of puts committed together (see `Batch`)."""
        return Batch(self)

    def get_message(self, digest: Digest, msg: M) -> M:
        msg.ParseFromString(self.get(digest))
        return msg

    def read_chunks(self, digest: Digest, offset: int = 0, limit: int = 0) -> Iterator[bytes]:
        """Stream a blob from `offset`, at most `limit` bytes (0: to the end)."""
        with self.open(digest) as f:
            if offset:
                f.seek(offset)
            left = limit or (digest.size - offset)
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk

    def export_file(
        self, digest: Digest, dest: Path, *, executable: bool = False, link: bool = True
    ) -> None:
        """Write a blob to `dest` (which must not exist); backends may hardlink.

        The copy goes to a temp file next to `dest` and takes its name only once
        whole, so a failure (a corrupt blob, a full disk) leaves no partial file."""
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dest))
        mode = 0o555 if executable else 0o444
        dest = Path(dest)
        tmp = dest.with_name(f".{dest.name}.rbs-tmp-{os.getpid()}-{next(_tmp_names)}")
        try:
            with self.open(digest) as src, open(tmp, "xb") as out:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    transfer.advance(len(chunk))
            os.chmod(tmp, mode)
            # A link, not a rename: it fails rather than replace a file made meanwhile.
            try:
                os.link(tmp, dest)
            except OSError as e:
                if e.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                    raise
                os.rename(tmp, dest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def require(self, digest: Digest) -> None:
        if digest.size and not self.contains(digest):
            raise BlobNotFound(digest)


def hash_file(path: Path, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
    """Digest of a file's bytes, read in chunks (constant memory)."""
    h = function.hasher()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return Digest(function=function, hash=h.hexdigest(), size=size)
