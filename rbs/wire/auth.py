"""Who may call what: principals and roles, the bearer header, and the gRPC auth interceptor.

A caller is a `Principal`: a user name and the roles its token grants. The server's
token tables (`rbs.server.tokens`) turn a presented token into one; this module reads
the `authorization: Bearer TOKEN` header (the scheme in any case, on both surfaces),
and decides, in one table each, which gRPC methods (`grpc_refusal`) and which jobs API
routes (`http_refusal`) a principal may call. docs/design/security.md prints the
table. A missing or unknown token is UNAUTHENTICATED (401); a known token calling what
its roles do not allow is PERMISSION_DENIED (403). Tokens are compared in constant time
and never logged; refusals are logged through `RefusalLog`, which keeps unauthenticated
clients from growing the log without bound.

Clients send the header with `auth_metadata(token)`; Bazel with
`--remote_header=authorization=Bearer TOKEN`.
"""

from __future__ import annotations

import enum
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from rbs.model import UNKNOWN_USER

log = logging.getLogger(__name__)

TOKEN_ENV = "RBS_REMOTE_TOKEN"
_HEADER = "authorization"
_SCHEME = "bearer"
# The user a client claims on a server without tokens (recorded, never trusted).
CLAIMED_USER_HEADER = "x-rbs-user"
MAX_USER_LEN = 64


class TokenError(ValueError):
    """A token file that cannot be used; the message says why and how to fix it."""


class Role(enum.Enum):
    """What a token may do (docs/design/security.md, "Who may do what")."""

    USER = "user"  # submit jobs, act on one's own, builds on the cluster
    ADMIN = "admin"  # also act on everyone's jobs
    WORKER = "worker"  # register as a worker (the Workers stream), the CAS
    RUN = "run"  # a run's scoped token: build actions and child jobs, while it runs


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """Who calls: `user` as recorded on jobs, the roles granted, and for a run's scoped
    token the run's lease id and job. `authenticated` is False on a server without tokens,
    where `user` is only what the client claimed."""

    user: str
    roles: frozenset[Role]
    run: str | None = None
    job_id: int | None = None
    authenticated: bool = True

    def has(self, role: Role) -> bool:
        return role in self.roles


class Refused(Exception):
    """A call refused: `status` 401 (no or unknown token) or 403 (not allowed). The message
    says what to do and never holds a token."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


# Turns the bearer token (None when absent) and the claimed user into a Principal, or
# raises Refused (401).
Authenticate = Callable[[str | None, str | None], Principal]


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


def bearer_token(header: str | None) -> str | None:
    """The token of an `authorization` header (None when there is no header); the scheme
    is matched in any case, as RFC 7235 says. Raises Refused for another scheme."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != _SCHEME:
        raise Refused("authorization header is not a Bearer token")
    token = token.strip()
    if not token:
        raise Refused("empty Bearer token")
    return token


def check_header(header: str | None, token: str) -> str | None:
    """None when `header` carries `token`, else a reason that does not reveal either."""
    if header is None:
        return "no authorization header"
    try:
        given = bearer_token(header)
    except Refused as e:
        return "wrong token" if str(e) == "empty Bearer token" else str(e)
    if not hmac.compare_digest((given or "").encode(), token.encode()):
        return "wrong token"
    return None


def claimed_user(value: str | None) -> str:
    """A claimed user name as recorded: printable, at most MAX_USER_LEN, else unknown."""
    if not value or len(value) > MAX_USER_LEN or not value.isprintable() or " " in value:
        return UNKNOWN_USER
    return value


# ---------------------------------------------------------------- who may call what

WORKERS_SERVICE = "rbs.v1.Workers"
WORKER_CONNECT = f"/{WORKERS_SERVICE}/Connect"
OPERATIONS_SERVICE = "google.longrunning.Operations"
# Operations have no owner: ending or forgetting one is an admin's action.
_ADMIN_OPERATIONS = ("/CancelOperation", "/DeleteOperation")


def grpc_refusal(p: Principal, method: str) -> str | None:
    """Why `p` may not call the gRPC `method` (`/package.Service/Method`), or None.

    The Workers stream is for worker tokens; a run's scoped token may use REAPI (the
    cluster's build slots and CAS) and nothing of rbs's own services or the operations
    listing; cancelling or deleting an operation (which has no owner) is for admins."""
    service = method.split("/")[1] if method.count("/") >= 2 else method
    if method == WORKER_CONNECT:
        if p.has(Role.WORKER):
            return None
        return f"user {p.user}'s token may not register as a worker (it needs the worker role)"
    if service == WORKERS_SERVICE:
        if p.has(Role.RUN):
            return "a run's scoped token may not read the cluster's status"
        return None
    if service == OPERATIONS_SERVICE:
        if p.has(Role.RUN):
            return "a run's scoped token may not list or cancel the cluster's operations"
        if method.endswith(_ADMIN_OPERATIONS) and not p.has(Role.ADMIN):
            return f"user {p.user} may not cancel or delete operations (it needs the admin role)"
        return None
    return None  # REAPI: every role


def http_refusal(p: Principal, method: str, path: str) -> str | None:
    """Why `p` may not call jobs API route `method path`, or None. Ownership (a user acts
    on their own jobs, a run on its children) is checked by the route once the job is
    known (`owner_refusal`). GET /metrics takes an admin or a worker token."""
    if path == "/metrics":
        if not p.authenticated or p.has(Role.ADMIN) or p.has(Role.WORKER):
            return None
        return "GET /metrics takes an admin or a worker token"
    if p.has(Role.USER):
        return None
    if p.has(Role.RUN):
        if path.startswith("/v1/cas/") or (method == "POST" and path == "/v1/jobs"):
            return None
        if method == "GET" and path.startswith("/v1/jobs/"):
            return None  # its own child jobs only (owner_refusal)
        return "a run's scoped token may submit child jobs and build, nothing else"
    return f"a {'/'.join(sorted(r.value for r in p.roles))} token may not use the jobs API"


def owner_refusal(p: Principal, job_id: int, owner: str, parent: int | None) -> str | None:
    """Why `p` may not change (or, for a run, read) job `job_id` of `owner`, or None: a
    user acts on their own jobs, an admin on every job, a run on the jobs it submitted."""
    if p.has(Role.ADMIN):
        return None
    if p.has(Role.RUN):
        if parent is not None and parent == p.job_id:
            return None
        return f"job {job_id} is not a child of job {p.job_id}, whose run this token is"
    if p.has(Role.USER) and owner == p.user:
        return None
    return f"job {job_id} belongs to {owner}; only {owner} or an admin may change it"


# ---------------------------------------------------------------- refusals in the log


class RefusalLog:
    """Logs refused calls, at most `burst` lines per `window` seconds; the next line after
    a quiet spell says how many were left out. Never given a token."""

    def __init__(
        self,
        burst: int = 10,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.window, self._clock = burst, window, clock
        self._start = -float("inf")
        self._logged = 0
        self.suppressed = 0

    def refused(self, what: str, peer: str | None, reason: str) -> None:
        now = self._clock()
        if now - self._start >= self.window:
            self._start, self._logged = now, 0
        if self._logged >= self.burst:
            self.suppressed += 1
            return
        self._logged += 1
        more = f" ({self.suppressed} more refused calls not logged)" if self.suppressed else ""
        self.suppressed = 0
        log.warning("refused %s from %s: %s%s", what, peer, reason, more)


# ---------------------------------------------------------------- the gRPC interceptor


def _metadata(metadata: Any, key: str) -> str | None:
    for k, value in metadata or ():
        if k == key:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


def _rejecting_handler(
    handler: grpc.RpcMethodHandler[Any, Any],
    method: str,
    code: grpc.StatusCode,
    message: str,
    refusals: RefusalLog,
) -> grpc.RpcMethodHandler[Any, Any]:
    async def reject(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        refusals.refused(method, context.peer(), message)
        await context.abort(code, message)

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


_HOW = (
    "this server requires 'authorization: Bearer TOKEN' "
    f"(rbs: set {TOKEN_ENV}; Bazel: --remote_header=authorization=Bearer TOKEN)"
)


class AuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Authenticates every call and refuses what the caller's roles do not allow."""

    def __init__(self, authenticate: Authenticate, refusals: RefusalLog | None = None) -> None:
        self._authenticate = authenticate
        self.refusals = refusals or RefusalLog()

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
        md = handler_call_details.invocation_metadata
        method = handler_call_details.method
        try:
            token = bearer_token(_metadata(md, _HEADER))
            principal = self._authenticate(token, _metadata(md, CLAIMED_USER_HEADER))
        except Refused as e:
            return _rejecting_handler(
                handler, method, grpc.StatusCode.UNAUTHENTICATED, f"{e}: {_HOW}", self.refusals
            )
        reason = grpc_refusal(principal, method)
        if reason is None:
            return handler
        return _rejecting_handler(
            handler, method, grpc.StatusCode.PERMISSION_DENIED, reason, self.refusals
        )
