"""The streaming halves of RemoteStore: an upload spooled until commit, a ByteStream Read
as a verifying file, and zstd framing of chunk streams (`compressed-blobs/zstd/...`)."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grpc
import zstandard

from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs.cas.errors import CasError, DigestMismatch
from rbs.cas.store import BlobWriter
from rbs.model import Digest

CHUNK = 1 << 20


class SpoolingWriter(BlobWriter):
    """Collects an upload in memory (spilling to a temp file when large), sends it at
    commit: with `small(digest, data)` up to `batch_limit`, else `large(digest, chunks)`."""

    def __init__(
        self,
        expected: Digest,
        *,
        batch_limit: int,
        small: Callable[[Digest, bytes], None],
        large: Callable[[Digest, Iterator[bytes]], None],
    ) -> None:
        super().__init__(expected)
        self._limit = batch_limit
        self._small = small
        self._large = large
        self._buf = tempfile.SpooledTemporaryFile(max_size=batch_limit)  # noqa: SIM115

    def _write(self, data: bytes) -> None:
        self._buf.write(data)

    def _commit(self) -> None:
        self._buf.seek(0)
        try:
            if self.expected.size <= self._limit:
                self._small(self.expected, self._buf.read())
            else:
                self._large(self.expected, file_chunks(self._buf))
        finally:
            self._buf.close()

    def abort(self) -> None:
        self._buf.close()


def file_chunks(f: Any) -> Iterator[bytes]:
    while chunk := f.read(CHUNK):
        yield chunk


def zstd_chunks(chunks: Iterable[bytes]) -> Iterator[bytes]:
    z = zstandard.ZstdCompressor(level=1).compressobj()
    for chunk in chunks:
        if out := z.compress(chunk):
            yield out
    yield z.flush()


class ReadStream(io.RawIOBase):
    """A ByteStream Read as a file; verifies the digest when read to the end. A gRPC
    error is raised as `failed(error)` says (the client's translation)."""

    def __init__(
        self,
        responses: Iterator[bs_pb2.ReadResponse],
        digest: Digest,
        failed: Callable[[grpc.RpcError], Exception],
        zstd: bool = False,
    ) -> None:
        super().__init__()
        self._responses = responses
        self._digest = digest
        self._failed = failed
        self._unzstd = zstandard.ZstdDecompressor().decompressobj() if zstd else None
        self._hasher = digest.function.hasher()
        self._pending = memoryview(b"")
        self._size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._pending:
            try:
                resp = next(self._responses)
            except StopIteration:
                self._finish()
                return 0
            except grpc.RpcError as e:
                raise self._failed(e) from None
            data = resp.data
            if self._unzstd is not None:
                try:
                    data = self._unzstd.decompress(data)
                except zstandard.ZstdError as e:
                    raise CasError(f"reading {self._digest}: bad zstd data: {e}") from None
            self._hasher.update(data)
            self._size += len(data)
            self._pending = memoryview(data)
        n = min(len(b), len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _finish(self) -> None:
        actual = Digest(
            function=self._digest.function, hash=self._hasher.hexdigest(), size=self._size
        )
        if actual != self._digest:
            raise DigestMismatch(self._digest, actual)
