"""Bearer-token auth: a server interceptor checking `authorization: Bearer TOKEN` on every RPC.

With a token configured, every call to every service the server hosts (REAPI and
rbs's own) must carry the header; the comparison is constant-time, a missing or
wrong token is answered UNAUTHENTICATED, and the log line names the method, the
peer and what was wrong, never the token. Clients send the header with
`auth_metadata(token)`; Bazel with `--remote_header=authorization=Bearer TOKEN`.
"""

from __future__ import annotations

import hmac
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc

log = logging.getLogger(__name__)

TOKEN_ENV = "RBS_REMOTE_TOKEN"
_HEADER = "authorization"
_SCHEME = "bearer "


class TokenError(ValueError):
    """A token file that cannot be used; the message says why and how to fix it."""


def read_token_file(path: Path) -> str:
    """The token in `path`: its only line, surrounding whitespace removed."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise TokenError(f"token file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read token file {path}: {e}") from None
    token = text.strip()
    if not token:
        raise TokenError(f"token file {path} is empty: write the token on its only line")
    if any(c.isspace() for c in token) or not token.isprintable() or not token.isascii():
        raise TokenError(
            f"token file {path} holds whitespace or non-printable characters inside the "
            "token: a token is one printable ASCII word"
        )
    return token


def token_from_env() -> str | None:
    """The client token from RBS_REMOTE_TOKEN, or None when unset or empty."""
    return os.environ.get(TOKEN_ENV) or None


def auth_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying the token (empty when there is none)."""
    return ((_HEADER, f"Bearer {token}"),) if token else ()


def _presented(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == _HEADER:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return text
    return None


def check_header(header: str | None, token: str) -> str | None:
    """None when `header` carries `token`, else a reason that does not reveal either."""
    if header is None:
        return "no authorization header"
    if header[: len(_SCHEME)].lower() != _SCHEME:
        return "authorization header is not a Bearer token"
    given = header[len(_SCHEME) :].strip().encode()
    if not hmac.compare_digest(given, token.encode()):
        return "wrong token"
    return None


def _rejecting_handler(
    handler: grpc.RpcMethodHandler[Any, Any], method: str, reason: str
) -> grpc.RpcMethodHandler[Any, Any]:
    message = (
        f"{reason}: this server requires 'authorization: Bearer TOKEN' "
        f"(rbs: set {TOKEN_ENV}; Bazel: --remote_header=authorization=Bearer TOKEN)"
    )

    async def reject(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        log.warning("rejected %s from %s: %s", method, context.peer(), reason)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def reject_stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await reject(request, context)
        yield  # pragma: no cover (abort raises first)

    # The rejecting handler has the method's own shape, so gRPC reads the request the
    # way the client sends it; the raw bytes are never deserialized.
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(reject_stream)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(reject)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(reject_stream)
    return grpc.unary_unary_rpc_method_handler(reject)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Rejects every call whose bearer token is missing or wrong."""

    def __init__(self, token: str) -> None:
        if not token:
            raise TokenError("the server token is empty")
        self._token = token

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler  # unknown method: gRPC answers UNIMPLEMENTED
        header = _presented(handler_call_details.invocation_metadata)
        reason = check_header(header, self._token)
        if reason is None:
            return handler
        return _rejecting_handler(handler, handler_call_details.method, reason)
