"""The google.bytestream service over the CAS: blob reads and writes of any size.

Bazel 4.2 moves every blob through ByteStream, even a 10-byte one, so the small case
is the hot path: a blob up to 64 KiB is collected in memory and stored by a group
commit (one thread hop and one sync shared by every small write in flight; the sync
must not run on the event loop), and a small read is served straight from the loop. Larger blobs stream in constant memory: writes
go chunk by chunk into a store writer that hashes as it goes, coalescing the
client's chunks to about 1 MiB per thread hop; reads go out in 1 MiB messages.

A write is committed only when the stream ends with `finish_write` and the bytes
match the digest in the resource name; anything else (wrong offset, too many bytes,
a hash mismatch, a stream that stops early, a client that goes away) aborts the
temporary file, so nothing partial is ever stored under a blob's name. Uploads do not
resume: QueryWriteStatus reports complete blobs and otherwise committed_size 0 (in
flight) or NOT_FOUND, and the client starts again from offset 0.

`compressed-blobs/zstd/...` names are served too: offsets and sizes in the name are
those of the uncompressed blob, which is what gets verified and stored.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterable, AsyncIterator
from typing import IO, Any, BinaryIO, cast

import grpc
import zstandard

from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.cas.errors import DigestMismatch
from rbs.cas.store import BlobStore, BlobWriter
from rbs.model import Digest
from rbs.server.cas_service import decompress_exact
from rbs.server.instances import Instances
from rbs.wire.errors import InvalidRequest, NotFound, OutOfRange, rpc_errors
from rbs.wire.resource_names import Compressor, ResourceName, parse_resource_name

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
SMALL_BLOB = 64 << 10
CHUNK = 1 << 20


class _BlobSink:
    """A file-like sink for zstd's stream writer that feeds a BlobWriter."""

    def __init__(self, writer: BlobWriter) -> None:
        self.writer = writer

    def write(self, data: bytes) -> int:
        self.writer.write(bytes(data))
        return len(data)


class _StreamingUpload:
    """A large upload: chunks coalesced, then hashed and written in a worker thread.

    One write is in flight while the next chunk arrives, so receiving overlaps with
    hashing and writing; at most two chunks are held in memory.
    """

    def __init__(self, writer: BlobWriter, compressed: bool) -> None:
        self.writer = writer
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._in_flight: asyncio.Future[None] | None = None
        self._zstd = (
            zstandard.ZstdDecompressor().stream_writer(
                cast(IO[bytes], _BlobSink(writer)), write_size=CHUNK
            )
            if compressed
            else None
        )

    def _write_sync(self, chunks: list[bytes]) -> None:
        data = b"".join(chunks)
        if self._zstd is not None:
            try:
                self._zstd.write(data)
            except zstandard.ZstdError as e:
                raise InvalidRequest(
                    f"zstd data for {self.writer.expected} does not decompress: {e}"
                ) from None
        else:
            self.writer.write(data)

    async def feed(self, data: bytes) -> None:
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= CHUNK:
            await self.flush()

    async def flush(self) -> None:
        await self._wait()
        if self._pending:
            chunks, self._pending, self._pending_size = self._pending, [], 0
            loop = asyncio.get_running_loop()
            self._in_flight = loop.run_in_executor(None, self._write_sync, chunks)

    async def _wait(self) -> None:
        if self._in_flight is not None:
            # Shielded: a cancelled call must not mark the thread's work done while it
            # still runs, or abort() would close the file under it.
            await asyncio.shield(self._in_flight)
            self._in_flight = None

    async def commit(self) -> None:
        await self.flush()
        await self._wait()
        self._in_flight = asyncio.get_running_loop().run_in_executor(None, self._commit_sync)
        await self._wait()

    def _commit_sync(self) -> None:
        self.writer.commit()

    def _abort_after(self, write: asyncio.Future[None]) -> None:
        if not write.cancelled():
            write.exception()  # retrieved, so asyncio does not log it: the call failed anyway
        self.writer.abort()

    async def discard(self) -> None:
        """Abort after the write in flight ends, so nothing is left when the call fails."""
        try:
            await self._wait()
        except asyncio.CancelledError:
            self.abort()
            raise
        except Exception:
            pass  # the call is failing already; the write's own error adds nothing
        self.writer.abort()

    def abort(self) -> None:
        """Discard the upload, once any write still running in a thread has finished."""
        if self._in_flight is not None and not self._in_flight.done():
            self._in_flight.add_done_callback(self._abort_after)
        else:
            self.writer.abort()


def _close_after(read: asyncio.Future[bytes], f: BinaryIO) -> None:
    """Close a blob file once the read-ahead still using it has ended."""
    if not read.cancelled():
        read.exception()  # retrieved, so asyncio does not log it: the call has ended
    f.close()


class _GroupCommit:
    """Small blobs from concurrent Write calls made durable together (group commit).

    A call hands its verified-on-arrival blob over and waits. One flusher stores
    everything waiting in one store batch (one sync for the lot) in a thread; blobs
    that arrive meanwhile form the next batch. A lone writer pays what a single put
    costs; many concurrent writers (Bazel uploading a build's outputs) share syncs.
    """

    def __init__(self, store: BlobStore) -> None:
        self.store = store
        self._waiting: list[tuple[Digest, bytes, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def put(self, digest: Digest, data: bytes) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((digest, data, future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        # Shielded: a cancelled call leaves its blob in the batch (whole and verified).
        await asyncio.shield(future)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                items, self._waiting = self._waiting, []
                try:
                    errors = await asyncio.to_thread(self._store_all, items)
                except Exception as exc:
                    errors = [exc] * len(items)
                for (_, _, future), err in zip(items, errors, strict=True):
                    if future.done():
                        continue
                    if err is None:
                        future.set_result(None)
                    else:
                        future.set_exception(err)
        finally:
            self._flusher = None

    def _store_all(
        self, items: list[tuple[Digest, bytes, asyncio.Future[None]]]
    ) -> list[Exception | None]:
        errors: list[Exception | None] = []
        good: list[tuple[Digest, bytes]] = []
        for digest, data, _ in items:
            actual = Digest.of(data, digest.function)
            if actual != digest:
                errors.append(DigestMismatch(digest, actual))
            else:
                errors.append(None)
                good.append((digest, data))
        if good:
            with self.store.batch() as batch:
                for digest, data in good:
                    batch.put(data, function=digest.function)
        return errors


class ByteStreamServicer(bs_grpc.ByteStreamServicer):  # type: ignore[misc]
    """Thin gRPC edge mapping ByteStream resource names onto a BlobStore."""

    def __init__(self, store: BlobStore, instances: Instances) -> None:
        self.store = store
        self.instances = instances
        # Resource names of uploads in flight (a name may be written twice at once).
        self._in_flight: collections.Counter[str] = collections.Counter()
        self._small_writes = _GroupCommit(store)

    # -- Read ---------------------------------------------------------------------

    def _open_at(self, digest: Digest, offset: int) -> BinaryIO:
        f = self.store.open(digest)
        if offset:
            f.seek(offset)
        return f

    @staticmethod
    def _read_chunk(
        f: BinaryIO, size: int, zstd: zstandard.ZstdCompressionObj | None, last: bool
    ) -> bytes:
        data = f.read(size)
        if zstd is None:
            return data
        out = zstd.compress(data)
        return out + zstd.flush() if last else out

    @rpc_errors
    async def Read(
        self, request: bs_pb2.ReadRequest, context: Context
    ) -> AsyncIterator[bs_pb2.ReadResponse]:
        rn = parse_resource_name(request.resource_name, write=False)
        self.instances.check(rn.instance)
        self.instances.check_function(rn.digest.function)
        digest = rn.digest
        offset, limit = request.read_offset, request.read_limit
        if offset < 0 or offset > digest.size:
            raise OutOfRange(
                f"read_offset {offset} is outside blob {digest} (size {digest.size}); "
                f"use 0 to {digest.size}"
            )
        if limit < 0:
            raise InvalidRequest(f"read_limit {limit} is negative; use 0 for no limit")
        compressed = rn.compressor is Compressor.ZSTD
        if compressed and limit:
            raise InvalidRequest(
                "read_limit must be 0 when reading compressed-blobs/: the compressed size "
                "is not known in advance"
            )
        length = digest.size - offset if limit == 0 else min(limit, digest.size - offset)
        if digest.size <= SMALL_BLOB:
            # A small blob is read (and verified) on the event loop: cheaper than a hop.
            data = self.store.get(digest)[offset : offset + length]
            if compressed:
                data = zstandard.ZstdCompressor(level=1).compress(data)
            yield bs_pb2.ReadResponse(data=data)
            return
        f = await asyncio.to_thread(self._open_at, digest, offset)
        zstd = zstandard.ZstdCompressor(level=1).compressobj() if compressed else None
        loop = asyncio.get_running_loop()
        ahead: asyncio.Future[bytes] | None = None

        def read_next(left: int) -> asyncio.Future[bytes]:
            n = min(CHUNK, left)
            return loop.run_in_executor(None, self._read_chunk, f, n, zstd, n == left)

        try:
            left = length
            if left > 0:
                ahead = read_next(left)
            while ahead is not None:
                # Shielded: the file must not be closed under a read still in its thread.
                data = await asyncio.shield(ahead)
                left -= min(CHUNK, left)
                # Read the next chunk while this one goes out.
                ahead = read_next(left) if left > 0 else None
                if not data and zstd is None:
                    raise NotFound(f"blob {digest} ended early; it has been removed")
                if data:
                    yield bs_pb2.ReadResponse(data=data)
            if length == 0:
                yield bs_pb2.ReadResponse(data=b"")
        finally:
            if ahead is None:
                f.close()
            else:
                ahead.add_done_callback(lambda done: _close_after(done, f))

    # -- Write --------------------------------------------------------------------

    @rpc_errors
    async def Write(
        self, request_iterator: AsyncIterable[bs_pb2.WriteRequest], context: Context
    ) -> bs_pb2.WriteResponse:
        requests = aiter(request_iterator)
        first = await anext(requests, None)
        if first is None:
            raise InvalidRequest("empty Write stream: the first WriteRequest must name the blob")
        name = first.resource_name
        rn = parse_resource_name(name, write=True)
        self.instances.check(rn.instance)
        self.instances.check_function(rn.digest.function)
        digest = rn.digest
        compressed = rn.compressor is Compressor.ZSTD
        if first.write_offset != 0:
            raise InvalidRequest(
                f"write_offset {first.write_offset} at the start of an upload of {digest}: "
                "this server does not resume uploads; start again at offset 0"
            )
        if self.store.contains(digest):
            # The spec lets a write of a present blob finish at once.
            return bs_pb2.WriteResponse(committed_size=-1 if compressed else digest.size)
        self._in_flight[name] += 1
        try:
            return await self._receive(first, requests, name, rn)
        finally:
            self._in_flight[name] -= 1
            if not self._in_flight[name]:
                del self._in_flight[name]

    async def _receive(
        self,
        first: bs_pb2.WriteRequest,
        requests: AsyncIterator[bs_pb2.WriteRequest],
        name: str,
        rn: ResourceName,
    ) -> bs_pb2.WriteResponse:
        digest = rn.digest
        compressed = rn.compressor is Compressor.ZSTD
        small = digest.size <= SMALL_BLOB
        # zstd makes incompressible data slightly larger (a few bytes per 128 KiB block).
        cap = digest.size + (digest.size // 64 + 1024 if compressed else 0)
        buf = bytearray()
        upload: _StreamingUpload | None = None
        received = 0
        req: bs_pb2.WriteRequest | None = first
        try:
            while req is not None:
                if req.resource_name and req.resource_name != name:
                    raise InvalidRequest(
                        f"WriteRequest names {req.resource_name!r} in the middle of the upload "
                        f"of {name!r}: one stream writes one resource"
                    )
                if req.write_offset != received:
                    raise InvalidRequest(
                        f"write_offset {req.write_offset} does not follow the {received} bytes "
                        f"received so far for {digest}; send the data in order"
                    )
                received += len(req.data)
                if received > cap:
                    raise InvalidRequest(
                        f"upload of {digest} sent {received} bytes, more than its size "
                        f"{digest.size}{' allows once compressed' if compressed else ''}; "
                        "nothing was stored"
                    )
                if small:
                    buf += req.data
                elif req.data:
                    if upload is None:
                        # Inline: creating a temp file is one cheap syscall, and a writer
                        # made in a thread could be lost if the call is cancelled meanwhile.
                        upload = _StreamingUpload(self.store.writer(digest), compressed)
                    await upload.feed(req.data)
                if req.finish_write:
                    break
                req = await anext(requests, None)
            else:
                raise InvalidRequest(
                    f"upload of {digest} ended after {received} bytes without finish_write; "
                    "nothing was stored, upload it again from offset 0"
                )
            if small:
                data = bytes(buf)
                if compressed:
                    data = decompress_exact(data, digest)
                await self._small_writes.put(digest, data)
            elif upload is None:
                raise InvalidRequest(f"upload of {digest} finished with no data; nothing stored")
            else:
                await upload.commit()
        except asyncio.CancelledError:
            # The client went away or the server is stopping: no awaiting now.
            if upload is not None:
                upload.abort()
            raise
        except Exception:
            if upload is not None:
                await upload.discard()
            raise
        return bs_pb2.WriteResponse(committed_size=received)

    @rpc_errors
    async def QueryWriteStatus(
        self, request: bs_pb2.QueryWriteStatusRequest, context: Context
    ) -> bs_pb2.QueryWriteStatusResponse:
        rn = parse_resource_name(request.resource_name, write=True)
        self.instances.check(rn.instance)
        self.instances.check_function(rn.digest.function)
        if self.store.contains(rn.digest):
            return bs_pb2.QueryWriteStatusResponse(committed_size=rn.digest.size, complete=True)
        if request.resource_name in self._in_flight:
            # Bytes in flight are not committed until the whole blob is verified.
            return bs_pb2.QueryWriteStatusResponse(committed_size=0, complete=False)
        raise NotFound(
            f"no upload of {rn.digest} is in progress and the blob is not stored; "
            "write it from offset 0"
        )
