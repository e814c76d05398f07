"""The REAPI ContentAddressableStorage service: FindMissingBlobs, batch read/update, GetTree.

Small requests run on the event loop (a few stat calls or small reads cost less than
a thread hop); anything that touches many blobs or many bytes runs in a worker thread
so one large request never stalls the other clients. Batch limits follow the spec:
a batch whose total size exceeds the advertised `max_batch_total_size_bytes` is
INVALID_ARGUMENT as a whole, and each item gets its own status otherwise.

FindMissingBlobs takes and gives bytes (`add_cas_servicer`): a large request in the
canonical encoding is read in bulk and answered from the store's index with no
message and no Python code per digest (rbs.wire.find_missing, rbs.cas.presence);
any other request goes through its protobuf message, with the same answers and errors.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import grpc
import zstandard
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import add_digests
from rbs.cas.errors import BlobNotFound, CorruptBlob, DigestMismatch
from rbs.cas.store import BlobStore
from rbs.model import Digest, DigestFunction
from rbs.server.cas_metrics import CountingDiskStore
from rbs.server.instances import Instances
from rbs.wire import find_missing
from rbs.wire.errors import InvalidRequest, NotFound, code_of, rpc_errors, status_of
from rbs.wire.reapi import (
    digest_from_proto,
    digests_from_proto,
    function_from_proto,
    request_function,
)

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
_INLINE_DIGESTS = 64
# Requests over this many bytes (about 64 digests) try the bulk path first.
_BULK_BYTES = 64 * 70
_INLINE_BYTES = 64 << 10
_DEFAULT_TREE_PAGE = 1000
_C = re_pb2.Compressor
_OK = status_pb2.Status(code=0)
M = TypeVar("M", bound=Message)


def decompress_exact(data: bytes, digest: Digest) -> bytes:
    """Decompress a zstd frame that must expand to exactly `digest.size` bytes."""
    # A streaming reader bounds memory by the digest's size, whatever the frame header
    # claims, so a decompression bomb costs at most one blob's worth.
    out = bytearray()
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
            while len(out) <= digest.size:
                chunk = reader.read(digest.size + 1 - len(out))
                if not chunk:
                    break
                out += chunk
    except zstandard.ZstdError as e:
        raise InvalidRequest(f"zstd data for {digest} does not decompress: {e}") from None
    if len(out) != digest.size:
        raise InvalidRequest(
            f"zstd data for {digest} decompresses to "
            f"{'more than ' if len(out) > digest.size else ''}{len(out)} bytes, not {digest.size}"
        )
    return bytes(out)


def get_message(store: BlobStore, digest: Digest, msg: M, what: str) -> M:
    """Read and parse a stored message; a blob of another kind is InvalidRequest."""
    try:
        return store.get_message(digest, msg)
    except DecodeError:
        raise InvalidRequest(
            f"{what} {digest} is not a {type(msg).__name__} message; pass the digest of one"
        ) from None


class CasServicer(re_grpc.ContentAddressableStorageServicer):  # type: ignore[misc]
    """Thin gRPC edge over a BlobStore."""

    def __init__(self, store: BlobStore, instances: Instances, max_batch_size: int) -> None:
        self.store = store
        self.instances = instances
        self.max_batch_size = max_batch_size

    @rpc_errors
    async def FindMissingBlobs(self, request: bytes, context: Context) -> bytes:
        """Takes and gives bytes (`add_cas_servicer`): a large request in the canonical
        encoding is answered from the store's index in bulk (rbs.wire.find_missing),
        anything else through its protobuf message, with the same answers and errors."""
        if len(request) > _BULK_BYTES and isinstance(self.store, CountingDiskStore):
            answer = await asyncio.to_thread(self._find_missing_bulk, self.store, request)
            if answer is not None:
                return answer
        return find_missing.encode_response(
            await self._find_missing(find_missing.decode_request(request))
        )

    def _find_missing_bulk(self, store: CountingDiskStore, data: bytes) -> bytes | None:
        """The answer from the index, or None (not canonical bytes, or the index is not
        ready): the caller then goes through the message."""
        bulk = find_missing.read_request(data)
        if bulk is None:
            return None
        # The same checks in the same order as `_find_missing`: every hash is 64 hex
        # characters here, which an unset digest_function takes as SHA256.
        self.instances.check(bulk.instance_name)
        fn = function_from_proto(bulk.digest_function) or DigestFunction.SHA256
        self.instances.check_function(fn)
        present = store.present_of(fn, bulk.keys, bulk.codes)
        if present is None:
            return None
        return find_missing.missing_response(bulk, present)

    async def _find_missing(
        self, request: re_pb2.FindMissingBlobsRequest
    ) -> re_pb2.FindMissingBlobsResponse:
        self.instances.check(request.instance_name)
        first = request.blob_digests[0] if request.blob_digests else None
        fn = request_function(request.digest_function, first)
        self.instances.check_function(fn)
        response = re_pb2.FindMissingBlobsResponse()
        digests = digests_from_proto(request.blob_digests, fn, "blob_digests")
        if len(digests) <= _INLINE_DIGESTS:
            missing = self.store.find_missing(digests)
        else:
            missing = await asyncio.to_thread(self.store.find_missing, digests)
        add_digests(response.missing_blob_digests, missing)
        return response

    @staticmethod
    def _verified_data(
        item: re_pb2.BatchUpdateBlobsRequest.Request, fn: DigestFunction | None, i: int
    ) -> tuple[Digest, bytes]:
        digest = digest_from_proto(item.digest, fn, f"requests[{i}].digest")
        if item.compressor == _C.ZSTD:
            data = decompress_exact(item.data, digest)
        elif item.compressor == _C.IDENTITY:
            data = item.data
        else:
            raise InvalidRequest(
                f"requests[{i}]: compressor {item.compressor} is not supported; "
                "use IDENTITY or ZSTD"
            )
        actual = Digest.of(data, digest.function)
        if actual != digest:
            raise DigestMismatch(digest, actual)
        return digest, data

    def _update_all(
        self, requests: list[re_pb2.BatchUpdateBlobsRequest.Request], fn: DigestFunction | None
    ) -> list[status_pb2.Status]:
        statuses: list[status_pb2.Status] = []
        good: list[tuple[int, Digest, bytes]] = []
        for i, item in enumerate(requests):
            try:
                digest, data = self._verified_data(item, fn, i)
            except Exception as exc:
                statuses.append(status_of(exc))
                continue
            statuses.append(_OK)
            if digest.size:
                good.append((i, digest, data))
        if not good:
            return statuses
        # One batch makes every verified blob durable together (one fsync pass).
        try:
            with self.store.batch() as batch:
                for _, digest, data in good:
                    batch.put(data, function=digest.function)
        except Exception as exc:
            if code_of(exc) is None:
                log.exception("BatchUpdateBlobs failed to store %d blob(s)", len(good))
            failed = status_of(exc)
            for i, _, _ in good:
                statuses[i] = failed
        return statuses

    @rpc_errors
    async def BatchUpdateBlobs(
        self, request: re_pb2.BatchUpdateBlobsRequest, context: Context
    ) -> re_pb2.BatchUpdateBlobsResponse:
        self.instances.check(request.instance_name)
        # Unset digest_function: inferred per item, so one malformed digest fails only
        # its own item.
        fn = function_from_proto(request.digest_function)
        self.instances.check_function(fn)
        total = sum(r.digest.size_bytes for r in request.requests)
        if total > self.max_batch_size:
            raise InvalidRequest(
                f"batch of {len(request.requests)} blobs totals {total} bytes, over this "
                f"server's limit of {self.max_batch_size}; split it, or upload large blobs "
                "with ByteStream Write"
            )
        items = list(request.requests)
        # Always in a thread, however small: a durable store syncs every batch (syncfs,
        # ms under load), which on the event loop stalled every other call.
        statuses = await asyncio.to_thread(self._update_all, items, fn)
        return re_pb2.BatchUpdateBlobsResponse(
            responses=[
                re_pb2.BatchUpdateBlobsResponse.Response(digest=item.digest, status=status)
                for item, status in zip(items, statuses, strict=True)
            ]
        )

    def _read_all(
        self, digests: list[re_pb2.Digest], fn: DigestFunction | None, zstd: bool
    ) -> list[re_pb2.BatchReadBlobsResponse.Response]:
        out = []
        for i, d in enumerate(digests):
            resp = re_pb2.BatchReadBlobsResponse.Response(digest=d, status=_OK)
            try:
                data = self.store.get(digest_from_proto(d, fn, f"digests[{i}]"))
                if zstd and data:
                    resp.data = zstandard.ZstdCompressor(level=1).compress(data)
                    resp.compressor = _C.ZSTD
                else:
                    resp.data = data
            except Exception as exc:
                resp.status.CopyFrom(status_of(exc))
                if resp.status.code == grpc.StatusCode.INTERNAL.value[0]:
                    log.exception("BatchReadBlobs item %d failed", i)
            out.append(resp)
        return out

    @rpc_errors
    async def BatchReadBlobs(
        self, request: re_pb2.BatchReadBlobsRequest, context: Context
    ) -> re_pb2.BatchReadBlobsResponse:
        self.instances.check(request.instance_name)
        fn = function_from_proto(request.digest_function)
        self.instances.check_function(fn)
        total = sum(max(d.size_bytes, 0) for d in request.digests)
        if total > self.max_batch_size:
            raise InvalidRequest(
                f"batch read of {len(request.digests)} blobs totals {total} bytes, over this "
                f"server's limit of {self.max_batch_size}; split it, or read large blobs "
                "with ByteStream Read"
            )
        zstd = _C.ZSTD in request.acceptable_compressors
        digests = list(request.digests)
        if total <= _INLINE_BYTES and len(digests) <= 1:
            responses = self._read_all(digests, fn, zstd)
        else:
            responses = await asyncio.to_thread(self._read_all, digests, fn, zstd)
        return re_pb2.BatchReadBlobsResponse(responses=responses)

    def _walk_tree(self, root: Digest, start: int, limit: int) -> list[re_pb2.Directory]:
        """Directories of the tree in breadth-first order, from index `start`.

        Subdirectories missing from the CAS are left out, as the spec allows; only a
        missing root is an error.
        """
        try:
            first = get_message(self.store, root, re_pb2.Directory(), "tree root")
        except BlobNotFound:
            raise NotFound(f"tree root directory {root} is not in the CAS") from None
        # A corrupt root (CorruptBlob) goes out as it is: NOT_FOUND, saying it was removed.
        queue = [first]
        seen = {root}
        i = 0
        while i < len(queue) and len(queue) < start + limit:
            for node in queue[i].directories:
                child = digest_from_proto(node.digest, root.function, f"directory {node.name!r}")
                if child in seen:
                    continue
                seen.add(child)
                try:
                    queue.append(
                        get_message(
                            self.store, child, re_pb2.Directory(), f"directory {node.name!r}"
                        )
                    )
                except (BlobNotFound, CorruptBlob):
                    log.info("GetTree %s: subdirectory %s is not in the CAS", root, child)
            i += 1
        return queue[start : start + limit]

    @rpc_errors
    async def GetTree(
        self, request: re_pb2.GetTreeRequest, context: Context
    ) -> AsyncIterator[re_pb2.GetTreeResponse]:
        self.instances.check(request.instance_name)
        fn = request_function(request.digest_function, request.root_digest)
        self.instances.check_function(fn)
        root = digest_from_proto(request.root_digest, fn, "root_digest")
        if request.page_size < 0:
            raise InvalidRequest(f"page_size {request.page_size} is negative")
        page = request.page_size or _DEFAULT_TREE_PAGE
        start = 0
        if request.page_token:
            if not request.page_token.isdigit():
                raise InvalidRequest(
                    f"page_token {request.page_token!r} was not issued by this server; "
                    "pass back a next_page_token exactly"
                )
            start = int(request.page_token)
        while True:
            # One directory more than the page tells whether another page follows.
            dirs = await asyncio.to_thread(self._walk_tree, root, start, page + 1)
            more = len(dirs) > page
            token = str(start + page) if more else ""
            yield re_pb2.GetTreeResponse(directories=dirs[:page], next_page_token=token)
            if not more:
                return
            start += page


def add_cas_servicer(server: grpc.aio.Server, servicer: CasServicer) -> None:
    """Register the CAS service as the generated `add_..._to_server` does, except that
    FindMissingBlobs takes and gives bytes (it parses and encodes them itself)."""
    handlers = {
        "FindMissingBlobs": grpc.unary_unary_rpc_method_handler(servicer.FindMissingBlobs),
        "BatchUpdateBlobs": grpc.unary_unary_rpc_method_handler(
            servicer.BatchUpdateBlobs,
            request_deserializer=re_pb2.BatchUpdateBlobsRequest.FromString,
            response_serializer=re_pb2.BatchUpdateBlobsResponse.SerializeToString,
        ),
        "BatchReadBlobs": grpc.unary_unary_rpc_method_handler(
            servicer.BatchReadBlobs,
            request_deserializer=re_pb2.BatchReadBlobsRequest.FromString,
            response_serializer=re_pb2.BatchReadBlobsResponse.SerializeToString,
        ),
        "GetTree": grpc.unary_stream_rpc_method_handler(
            servicer.GetTree,
            request_deserializer=re_pb2.GetTreeRequest.FromString,
            response_serializer=re_pb2.GetTreeResponse.SerializeToString,
        ),
    }
    service = "build.bazel.remote.execution.v2.ContentAddressableStorage"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)  # type: ignore[attr-defined]
