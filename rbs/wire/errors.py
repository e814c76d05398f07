"""The one place where domain errors become status codes: gRPC statuses, and the jobs API's HTTP ones.

Servicers raise domain exceptions (`rbs.cas.errors.*`, the request errors below, or
any type registered with `register_error`) and never build statuses themselves:

    class CasServicer(re_grpc.ContentAddressableStorageServicer):
        @rpc_errors
        async def FindMissingBlobs(self, request, context): ...

`rpc_errors` wraps unary methods and async-generator (server-streaming) methods alike.
A mapped error aborts the call with its status and message; an unexpected exception is
logged with its traceback and answered INTERNAL, and the server keeps serving. Batch
RPCs that report one status per item use `status_of(exc)` so per-item and whole-call
errors are mapped by the same table.

`DecodingInterceptor` extends the same mapping to bytes that are not a valid message
of the method's request type: gRPC itself would answer UNKNOWN and log a traceback;
rbs answers INVALID_ARGUMENT naming the method.

Errors that carry `google.rpc` details (`MissingBlobs` -> `PreconditionFailure`) send
them in the standard `grpc-status-details-bin` trailer, which REAPI clients read to
learn which blobs to upload.

The jobs HTTP API (rbs.server.jobs_http) answers an error with a gRPC code name and an
HTTP status, from its own table below (`http_error`): it is older than the gRPC one and
answers some errors differently (any CAS error is the request's fault there, 400).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar, cast

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

from rbs.cas.errors import (
    BlobNotFound,
    CasError,
    CorruptBlob,
    DigestMismatch,
    InvalidDigest,
    InvalidTree,
    StoreFull,
)
from rbs.model import Digest

log = logging.getLogger(__name__)

STATUS_DETAILS_KEY = "grpc-status-details-bin"


class RequestError(Exception):
    """Base of the errors below: the message says what was wrong and how to fix it."""


class InvalidRequest(RequestError):
    """A malformed or inconsistent request (INVALID_ARGUMENT)."""


class UnknownInstance(RequestError):
    """An instance name the server does not serve (INVALID_ARGUMENT)."""

    def __init__(self, name: str, accepted: Iterable[str]) -> None:
        names = ", ".join(repr(n) for n in accepted)
        super().__init__(
            f"unknown instance name {name!r}: this server accepts {names} "
            "(set the client's instance name to one of them, or add it to "
            "[server] instance_names)"
        )
        self.name = name


class NotFound(RequestError):
    """Something the request names does not exist (NOT_FOUND)."""


class OutOfRange(RequestError):
    """An offset or limit outside the resource (OUT_OF_RANGE)."""


class TooLarge(RequestError):
    """A request over a server limit (RESOURCE_EXHAUSTED)."""


class Unauthenticated(RequestError):
    """A missing or wrong bearer token (UNAUTHENTICATED)."""


class PermissionDenied(RequestError):
    """A known caller asking for what its token's roles do not allow, e.g. cancelling
    another user's job (PERMISSION_DENIED, 403); the message names the owner."""


class StorageFull(RequestError):
    """The server cannot write under its data dir (disk or quota full): RESOURCE_EXHAUSTED
    over gRPC, 507 Insufficient Storage over the jobs API. The message names the folder to
    free; nothing of the refused request was kept."""


class FailedPrecondition(RequestError):
    """The server cannot serve the request as things stand, e.g. a peer of another version
    (FAILED_PRECONDITION)."""


class MissingBlobs(RequestError):
    """Blobs a request depends on are not in the CAS (FAILED_PRECONDITION + details)."""

    def __init__(self, digests: Iterable[Digest], what: str = "request") -> None:
        self.digests = tuple(digests)
        shown = ", ".join(str(d) for d in self.digests[:5])
        more = f" and {len(self.digests) - 5} more" if len(self.digests) > 5 else ""
        super().__init__(
            f"{len(self.digests)} blob(s) the {what} names are not in the CAS: {shown}{more}; "
            "upload them first"
        )


# Most specific first: the first matching row wins.
_TABLE: list[tuple[type[BaseException], grpc.StatusCode]] = [
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (MissingBlobs, grpc.StatusCode.FAILED_PRECONDITION),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (UnknownInstance, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (OutOfRange, grpc.StatusCode.OUT_OF_RANGE),
    (TooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StorageFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (BlobNotFound, grpc.StatusCode.NOT_FOUND),
    # A corrupt blob has been removed; NOT_FOUND makes clients upload it again.
    (CorruptBlob, grpc.StatusCode.NOT_FOUND),
    (DigestMismatch, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidDigest, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidTree, grpc.StatusCode.INVALID_ARGUMENT),
    (StoreFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
]


def register_error(exc_type: type[BaseException], code: grpc.StatusCode) -> None:
    """Map another component's domain error (e.g. the scheduler's) to a status code."""
    _TABLE.insert(0, (exc_type, code))


def code_of(exc: BaseException) -> grpc.StatusCode | None:
    """The status code for a domain error, or None when the error is not a domain error."""
    for exc_type, code in _TABLE:
        if isinstance(exc, exc_type):
            return code
    return None


def _details(exc: BaseException) -> list[Any]:
    if isinstance(exc, MissingBlobs):
        pf = error_details_pb2.PreconditionFailure()
        for d in exc.digests:
            pf.violations.add(type="MISSING", subject=f"blobs/{d.hash}/{d.size}")
        return [pf]
    return []


def status_of(exc: BaseException) -> status_pb2.Status:
    """A `google.rpc.Status` for an error (INTERNAL when it is not a domain error)."""
    code = code_of(exc) or grpc.StatusCode.INTERNAL
    status = status_pb2.Status(code=code.value[0], message=str(exc) or type(exc).__name__)
    for detail in _details(exc):
        status.details.add().Pack(detail)
    return status


async def abort_with(context: grpc.aio.ServicerContext[Any, Any], exc: BaseException) -> None:
    """Abort the call with the status mapped from `exc` (raises, never returns)."""
    code = code_of(exc) or grpc.StatusCode.INTERNAL
    message = str(exc) or type(exc).__name__
    trailer: tuple[tuple[str, bytes], ...] = ()
    if _details(exc):
        trailer = ((STATUS_DETAILS_KEY, status_of(exc).SerializeToString()),)
    await context.abort(code, message, trailing_metadata=trailer)


async def _handle(context: grpc.aio.ServicerContext[Any, Any], name: str, exc: Exception) -> None:
    if isinstance(exc, grpc.aio.AbortError):
        raise exc
    if code_of(exc) is None:
        log.exception("internal error in %s", name)
        exc = RuntimeError(
            f"internal error in {name}: {type(exc).__name__}: {exc}; the server log has details"
        )
    elif code_of(exc) is grpc.StatusCode.RESOURCE_EXHAUSTED:
        log.warning("%s: %s", name, exc)  # the operator has to act (disk full)
    else:
        # Misses and client mistakes are routine (every Bazel cache miss is a NOT_FOUND).
        log.debug("%s: %s", name, exc)
    await abort_with(context, exc)


F = TypeVar("F", bound=Callable[..., Any])


def rpc_errors(method: F) -> F:
    """Decorate a servicer method (coroutine or async generator) to map its errors."""
    name = method.__name__
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for item in method(self, request, context):
                    yield item
            except Exception as exc:
                await _handle(context, name, exc)

        return cast(F, stream)

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: Any) -> Any:
        try:
            return await method(self, request, context)
        except Exception as exc:
            await _handle(context, name, exc)

    return cast(F, unary)


class DecodingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Decodes requests inside the call, so undecodable bytes are INVALID_ARGUMENT."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return _decoding_handler(handler, handler_call_details.method)


def _decoding_handler(handler: Any, method: str) -> Any:
    deserialize = handler.request_deserializer
    serialize = handler.response_serializer

    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as e:
            raise InvalidRequest(
                f"the request to {method} is not a valid protobuf message of its type: {e}"
            ) from None

    if handler.request_streaming:
        inner = handler.stream_unary or handler.stream_stream

        async def requests(raw: AsyncIterator[bytes]) -> AsyncIterator[Any]:
            async for data in raw:
                yield decode(data)

        if handler.stream_unary is not None:

            async def stream_unary(raw: AsyncIterator[bytes], context: Any) -> Any:
                return await inner(requests(raw), context)

            return grpc.stream_unary_rpc_method_handler(stream_unary, response_serializer=serialize)
        if not inspect.isasyncgenfunction(inner):
            return handler

        async def stream_stream(raw: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
            async for item in inner(requests(raw), context):
                yield item

        return grpc.stream_stream_rpc_method_handler(stream_stream, response_serializer=serialize)

    if handler.unary_stream is not None:
        unary_stream_inner = handler.unary_stream
        if not inspect.isasyncgenfunction(unary_stream_inner):
            return handler

        async def unary_stream(data: bytes, context: Any) -> AsyncIterator[Any]:
            try:
                request = decode(data)
            except InvalidRequest as exc:
                await abort_with(context, exc)
            async for item in unary_stream_inner(request, context):
                yield item

        return grpc.unary_stream_rpc_method_handler(unary_stream, response_serializer=serialize)

    unary_inner = handler.unary_unary

    async def unary_unary(data: bytes, context: Any) -> Any:
        try:
            request = decode(data)
        except InvalidRequest as exc:
            await abort_with(context, exc)
        return await unary_inner(request, context)

    return grpc.unary_unary_rpc_method_handler(unary_unary, response_serializer=serialize)


# ---------------------------------------------------------------- the jobs HTTP API

# The error document's `code` is a gRPC code name; this is the HTTP status that goes with it.
HTTP_STATUS: dict[str, int] = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 412,
    "INTERNAL": 500,
    # Only a full disk maps here (the journal's StorageFull, the CAS's StoreFull): the
    # operator must free space, the request was fine.
    "RESOURCE_EXHAUSTED": 507,
}

# Most specific first: the first matching row wins. A row without a code is for an error
# that names its own code in a `code` attribute (the job driver's refusals).
_HTTP_TABLE: list[tuple[type[BaseException], str | None]] = [
    (Unauthenticated, "UNAUTHENTICATED"),
    (PermissionDenied, "PERMISSION_DENIED"),
    (StorageFull, "RESOURCE_EXHAUSTED"),
    (FailedPrecondition, "FAILED_PRECONDITION"),
    (NotFound, "NOT_FOUND"),
    (InvalidRequest, "INVALID_ARGUMENT"),
    # rbs.units.SpecError is one: a flag, spec or manifest value that does not parse.
    (ValueError, "INVALID_ARGUMENT"),
    (BlobNotFound, "NOT_FOUND"),
    # A corrupt blob has been removed: missing now, as over gRPC.
    (CorruptBlob, "NOT_FOUND"),
    # The server's CAS is out of space: nothing was stored, the upload may be retried.
    (StoreFull, "RESOURCE_EXHAUSTED"),
    (CasError, "INVALID_ARGUMENT"),
]


def register_http_error(exc_type: type[BaseException], code: str | None = None) -> None:
    """Map another component's domain error to a jobs API code name; with no code, the
    error's own `code` attribute names it."""
    _HTTP_TABLE.insert(0, (exc_type, code))


def http_error(exc: BaseException) -> tuple[int, str] | None:
    """The HTTP status and code name the jobs API answers `exc` with, or None when it is
    not a domain error (the server's own failure, answered 500 by the HTTP server)."""
    for exc_type, code in _HTTP_TABLE:
        if isinstance(exc, exc_type):
            name = code if code is not None else str(getattr(exc, "code", "INTERNAL"))
            return HTTP_STATUS.get(name, 500), name
    return None
