"""Typed synchronous clients of a REAPI server: `RemoteStore` (a BlobStore) and `ActionCacheClient`.

    channel = connect("grpc://127.0.0.1:8980")        # token from RBS_REMOTE_TOKEN
    store = RemoteStore(channel)                        # find_missing/put/get/open/...
    digest = store.put(b"hello")                        # BLAKE3 unless told otherwise
    results = ActionCacheClient(channel)
    hit = results.get(action_digest)                    # None on a miss

Small blobs travel in BatchUpdateBlobs/BatchReadBlobs calls (`put_blobs`/`get_blobs`
batch many at once); blobs over the batch limit go through ByteStream in 1 MiB
chunks, from memory, from a file or from a spooled writer, so uploading or reading a
large blob needs constant memory; with `zstd=True` (when the server's Capabilities
offer it) those go as `compressed-blobs/zstd/...`. Every request names its digest
function, so BLAKE3 and SHA256 blobs mix freely. gRPC errors become rbs.cas errors (NOT_FOUND ->
BlobNotFound) or `RemoteError`, whose message carries the server's explanation.
"""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.google.bytestream import bytestream_pb2 as bs_pb2
from rbs._proto.google.bytestream import bytestream_pb2_grpc as bs_grpc
from rbs.cas.digests import add_digests, digest_to_pb, function_to_pb
from rbs.cas.errors import BlobNotFound, CasError, DigestMismatch
from rbs.cas.store import BlobStore, BlobWriter, hash_file
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction
from rbs.wire.auth import auth_metadata, token_from_env
from rbs.wire.limits import DEFAULT_BATCH_SIZE, MESSAGE_HEADROOM
from rbs.wire.reapi_streams import (
    CHUNK,
    ReadStream,
    SpoolingWriter,
    file_chunks,
    zstd_chunks,
)
from rbs.wire.resource_names import Compressor, format_read_name, format_write_name

# FindMissingBlobs requests stay far below the message limit at ~80 bytes a digest.
_FIND_BATCH = 10_000
# Per-blob framing inside a batch message, counted against the batch limit.
_ITEM_OVERHEAD = 128
# Uploads of at most this many bytes in all skip FindMissingBlobs (`to_upload`).
_SEND_WITHOUT_ASKING = 64 << 10


class RemoteError(CasError):
    """A call the server refused or that failed in transport; `code` is the gRPC status."""

    def __init__(self, what: str, err: grpc.RpcError) -> None:
        code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        hint = ""
        if code is grpc.StatusCode.UNAUTHENTICATED:
            hint = " (set RBS_REMOTE_TOKEN to the server's token)"
        elif code is grpc.StatusCode.UNAVAILABLE:
            hint = " (is the server running at that address?)"
        super().__init__(f"{what}: {code.name}: {details}{hint}")
        self.code = code


# The CA file (PEM) to trust the server's TLS certificate with; `--tls-ca FILE` sets it.
TLS_CA_ENV = "RBS_REMOTE_TLS_CA"


def parse_target(target: str) -> str:
    """`grpc://host:port`, `grpcs://host:port` (TLS) or `host:port` -> the gRPC target."""
    for scheme in ("grpc://", "grpcs://"):
        if target.startswith(scheme):
            target = target[len(scheme) :]
            break
    else:
        if "://" in target:
            raise ValueError(
                f"unsupported remote address {target!r}: use HOST:PORT, grpc://HOST:PORT, "
                "or grpcs://HOST:PORT for TLS"
            )
    if not target or target.endswith(":"):
        raise ValueError(f"remote address {target!r} has no port: use HOST:PORT")
    return target


def channel_options(max_message_size: int = DEFAULT_BATCH_SIZE + MESSAGE_HEADROOM) -> list[Any]:
    return [
        ("grpc.max_receive_message_length", max_message_size),
        ("grpc.max_send_message_length", max_message_size),
    ]


def tls_credentials(target: str) -> grpc.ChannelCredentials | None:
    """TLS for `target` when it says grpcs:// or RBS_REMOTE_TLS_CA names a CA file to trust
    (then grpcs:// uses that CA, plain grpcs:// the system's roots); None for plaintext."""
    ca = os.environ.get(TLS_CA_ENV) or None
    if ca is None and not target.startswith("grpcs://"):
        return None
    roots = None
    if ca is not None:
        try:
            roots = Path(ca).read_bytes()
        except OSError as e:
            raise ValueError(f"--tls-ca {ca!r} (${TLS_CA_ENV}): {e.strerror}") from None
        if b"-----BEGIN CERTIFICATE" not in roots:
            raise ValueError(f"--tls-ca {ca!r} (${TLS_CA_ENV}): not a PEM certificate file")
    return grpc.ssl_channel_credentials(root_certificates=roots)


def connect(target: str, **options: Any) -> grpc.Channel:
    """A channel to `target` with rbs's message limits: TLS for grpcs:// or with a CA
    (`tls_credentials`), else plaintext (tokens then travel in clear text)."""
    creds = tls_credentials(target)
    opts = channel_options(**options)
    if creds is not None:
        return grpc.secure_channel(parse_target(target), creds, options=opts)
    return grpc.insecure_channel(parse_target(target), options=opts)


def aio_connect(target: str, options: list[Any]) -> grpc.aio.Channel:
    """`connect` for asyncio (the worker's stream), with the same TLS rules."""
    creds = tls_credentials(target)
    if creds is not None:
        return grpc.aio.secure_channel(parse_target(target), creds, options=options)
    return grpc.aio.insecure_channel(parse_target(target), options=options)


class _Call:
    """Stubs plus the metadata (auth) every call carries."""

    def __init__(self, channel: grpc.Channel, token: str | None) -> None:
        self.metadata = auth_metadata(token if token is not None else token_from_env())
        self.cas = re_grpc.ContentAddressableStorageStub(channel)
        self.bytestream = bs_grpc.ByteStreamStub(channel)
        self.ac = re_grpc.ActionCacheStub(channel)
        self.caps = re_grpc.CapabilitiesStub(channel)


def _translate(err: grpc.RpcError, what: str, digest: Digest | None = None) -> CasError:
    if (
        digest is not None
        and isinstance(err, grpc.Call)
        and err.code() is grpc.StatusCode.NOT_FOUND
    ):
        return BlobNotFound(digest)
    return RemoteError(what, err)


class RemoteStore(BlobStore):
    """The BlobStore interface over a REAPI server's CAS and ByteStream services."""

    def __init__(
        self,
        channel: grpc.Channel,
        *,
        instance: str = "",
        token: str | None = None,
        max_batch_size: int = DEFAULT_BATCH_SIZE,
        zstd: bool = False,
    ) -> None:
        self._call = _Call(channel, token)
        self.instance = instance
        self.max_batch_size = max_batch_size
        # ByteStream transfers as compressed-blobs/zstd/ (only if the server offers it).
        self.zstd = zstd
        self._compressor = Compressor.ZSTD if zstd else Compressor.IDENTITY
        # Blobs up to this size go in batch calls; larger ones through ByteStream.
        self.batch_limit = min(max_batch_size - _ITEM_OVERHEAD, CHUNK)

    # -- queries --------------------------------------------------------------------

    def contains(self, digest: Digest) -> bool:
        return not self.find_missing([digest])

    def find_missing(self, digests: Iterable[Digest]) -> list[Digest]:
        by_fn: dict[DigestFunction, list[Digest]] = {}
        for d in dict.fromkeys(digests):
            if d.size:
                by_fn.setdefault(d.function, []).append(d)
        missing: list[Digest] = []
        for fn, group in by_fn.items():
            for start in range(0, len(group), _FIND_BATCH):
                part = group[start : start + _FIND_BATCH]
                req = re_pb2.FindMissingBlobsRequest(
                    instance_name=self.instance, digest_function=function_to_pb(fn)
                )
                add_digests(req.blob_digests, part)
                try:
                    resp = self._call.cas.FindMissingBlobs(req, metadata=self._call.metadata)
                except grpc.RpcError as e:
                    raise _translate(e, "FindMissingBlobs") from None
                absent = {(m.hash, m.size_bytes) for m in resp.missing_blob_digests}
                missing.extend(d for d in part if (d.hash, d.size) in absent)
        return missing

    # -- uploads --------------------------------------------------------------------

    def to_upload(self, digests: Iterable[Digest]) -> list[Digest]:
        """Which of `digests` to send: every one, without a round trip, when together
        they are small (a trivial action's outputs cost less to send than to ask
        about), else those FindMissingBlobs says the server lacks."""
        wanted = [d for d in dict.fromkeys(digests) if d.size]
        if sum(d.size for d in wanted) <= _SEND_WITHOUT_ASKING:
            return wanted
        return self.find_missing(wanted)

    def writer(self, expected: Digest) -> BlobWriter:
        return SpoolingWriter(
            expected,
            batch_limit=self.batch_limit,
            small=lambda d, data: self._batch_update([(d, data)]),
            large=self._bytestream_write,
        )

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
        if digest.size == 0:
            return digest
        if digest.size <= self.batch_limit:
            self._batch_update([(digest, data)])
        else:
            view = memoryview(data)
            self._bytestream_write(
                digest, (bytes(view[i : i + CHUNK]) for i in range(0, len(data), CHUNK))
            )
        return digest

    def put_file(
        self,
        path: Path,
        *,
        function: DigestFunction = DEFAULT_FUNCTION,
        expected: Digest | None = None,
    ) -> Digest:
        digest = expected or hash_file(path, function)
        if digest.size == 0:
            return digest
        with open(path, "rb") as f:
            if digest.size <= self.batch_limit:
                self._batch_update([(digest, f.read())])
            else:
                self._bytestream_write(digest, file_chunks(f))
        return digest

    def put_blobs(
        self, blobs: Iterable[bytes], function: DigestFunction = DEFAULT_FUNCTION
    ) -> list[Digest]:
        """Upload many blobs, small ones packed into as few batch calls as fit."""
        digests: list[Digest] = []
        batch: list[tuple[Digest, bytes]] = []
        size = 0
        for data in blobs:
            d = Digest.of(data, function)
            digests.append(d)
            if d.size > self.batch_limit:
                self.put(data, expected=d)
                continue
            if batch and size + d.size + _ITEM_OVERHEAD > self.max_batch_size:
                self._batch_update(batch)
                batch, size = [], 0
            batch.append((d, data))
            size += d.size + _ITEM_OVERHEAD
        if batch:
            self._batch_update(batch)
        return digests

    def _batch_update(self, items: list[tuple[Digest, bytes]]) -> None:
        fn = items[0][0].function
        req = re_pb2.BatchUpdateBlobsRequest(
            instance_name=self.instance, digest_function=function_to_pb(fn)
        )
        for d, data in items:
            req.requests.add(digest=digest_to_pb(d), data=data)
        try:
            resp = self._call.cas.BatchUpdateBlobs(req, metadata=self._call.metadata)
        except grpc.RpcError as e:
            raise _translate(e, f"uploading {len(items)} blob(s)") from None
        for r in resp.responses:
            if r.status.code:
                raise CasError(
                    f"server refused blob {fn.value}:{r.digest.hash}/{r.digest.size_bytes}: "
                    f"{_code_name(r.status.code)}: {r.status.message}"
                )

    def _bytestream_write(self, digest: Digest, chunks: Iterable[bytes]) -> None:
        name = format_write_name(self.instance, str(uuid.uuid4()), digest, self._compressor)
        if self.zstd:
            chunks = zstd_chunks(chunks)

        def requests() -> Iterator[bs_pb2.WriteRequest]:
            offset = 0
            pending: bytes | None = None
            for chunk in chunks:
                if pending is not None:
                    yield bs_pb2.WriteRequest(
                        resource_name=name if offset == 0 else "",
                        write_offset=offset,
                        data=pending,
                    )
                    offset += len(pending)
                pending = chunk
            yield bs_pb2.WriteRequest(
                resource_name=name if offset == 0 else "",
                write_offset=offset,
                data=pending or b"",
                finish_write=True,
            )

        try:
            self._call.bytestream.Write(requests(), metadata=self._call.metadata)
        except grpc.RpcError as e:
            raise _translate(e, f"uploading {digest}") from None

    # -- downloads ------------------------------------------------------------------

    def _open(self, digest: Digest) -> BinaryIO:
        name = format_read_name(self.instance, digest, self._compressor)
        responses = self._call.bytestream.Read(
            bs_pb2.ReadRequest(resource_name=name), metadata=self._call.metadata
        )
        stream = ReadStream(
            iter(responses),
            digest,
            lambda e: _translate(e, f"reading {digest}", digest),
            self.zstd,
        )
        return cast(BinaryIO, io.BufferedReader(stream, CHUNK))

    def get(self, digest: Digest) -> bytes:
        if digest.size == 0:
            return b""
        if digest.size <= self.batch_limit:
            return self.get_blobs([digest])[digest]
        return super().get(digest)

    def get_blobs(self, digests: Iterable[Digest]) -> dict[Digest, bytes]:
        """Read many small blobs in batch calls; raises BlobNotFound for the first missing."""
        out: dict[Digest, bytes] = {}
        pending = list(dict.fromkeys(digests))
        i = 0
        while i < len(pending):
            batch: list[Digest] = []
            size = 0
            while i < len(pending) and (
                not batch or size + pending[i].size + _ITEM_OVERHEAD <= self.max_batch_size
            ):
                batch.append(pending[i])
                size += pending[i].size + _ITEM_OVERHEAD
                i += 1
            out.update(self._batch_read(batch))
        return out

    def _batch_read(self, digests: list[Digest]) -> dict[Digest, bytes]:
        if len(digests) == 1 and digests[0].size > self.batch_limit:
            return {digests[0]: super().get(digests[0])}
        by_key = {(d.function, d.hash, d.size): d for d in digests}
        out: dict[Digest, bytes] = {}
        for fn in {d.function for d in digests}:
            req = re_pb2.BatchReadBlobsRequest(
                instance_name=self.instance,
                digests=[digest_to_pb(d) for d in digests if d.function is fn],
                digest_function=function_to_pb(fn),
            )
            try:
                resp = self._call.cas.BatchReadBlobs(req, metadata=self._call.metadata)
            except grpc.RpcError as e:
                raise _translate(e, f"reading {len(digests)} blob(s)") from None
            for r in resp.responses:
                d = by_key[(fn, r.digest.hash, r.digest.size_bytes)]
                if r.status.code == grpc.StatusCode.NOT_FOUND.value[0]:
                    raise BlobNotFound(d)
                if r.status.code:
                    raise CasError(f"server could not read {d}: {r.status.message}")
                actual = Digest.of(r.data, fn)
                if actual != d:
                    raise DigestMismatch(d, actual)
                out[d] = r.data
        return out

    def read_chunks(self, digest: Digest, offset: int = 0, limit: int = 0) -> Iterator[bytes]:
        req = bs_pb2.ReadRequest(
            resource_name=format_read_name(self.instance, digest),
            read_offset=offset,
            read_limit=limit,
        )
        try:
            for resp in self._call.bytestream.Read(req, metadata=self._call.metadata):
                yield resp.data
        except grpc.RpcError as e:
            raise _translate(e, f"reading {digest}", digest) from None

    def delete(self, digest: Digest) -> bool:
        raise CasError(
            f"cannot delete {digest} from a remote store: REAPI has no delete; the server "
            "evicts blobs itself (rbs remote serve --max-cas-size)"
        )


def _code_name(value: int) -> str:
    for code in grpc.StatusCode:
        if code.value[0] == value:
            return code.name
    return f"code {value}"


class ActionCacheClient:
    """GetActionResult/UpdateActionResult and GetCapabilities against one instance."""

    def __init__(self, channel: grpc.Channel, *, instance: str = "", token: str | None = None):
        self._call = _Call(channel, token)
        self.instance = instance

    def get(
        self, action: Digest, *, inline_stdout: bool = False, inline_stderr: bool = False
    ) -> re_pb2.ActionResult | None:
        """The cached result of `action`, or None on a miss."""
        req = re_pb2.GetActionResultRequest(
            instance_name=self.instance,
            action_digest=digest_to_pb(action),
            inline_stdout=inline_stdout,
            inline_stderr=inline_stderr,
            digest_function=function_to_pb(action.function),
        )
        try:
            return self._call.ac.GetActionResult(req, metadata=self._call.metadata)
        except grpc.RpcError as e:
            if isinstance(e, grpc.Call) and e.code() is grpc.StatusCode.NOT_FOUND:
                return None
            raise RemoteError(f"GetActionResult {action}", e) from None

    def update(self, action: Digest, result: re_pb2.ActionResult) -> re_pb2.ActionResult:
        req = re_pb2.UpdateActionResultRequest(
            instance_name=self.instance,
            action_digest=digest_to_pb(action),
            action_result=result,
            digest_function=function_to_pb(action.function),
        )
        try:
            return self._call.ac.UpdateActionResult(req, metadata=self._call.metadata)
        except grpc.RpcError as e:
            raise RemoteError(f"UpdateActionResult {action}", e) from None

    def capabilities(self) -> re_pb2.ServerCapabilities:
        req = re_pb2.GetCapabilitiesRequest(instance_name=self.instance)
        try:
            return self._call.caps.GetCapabilities(req, metadata=self._call.metadata)
        except grpc.RpcError as e:
            raise RemoteError("GetCapabilities", e) from None
