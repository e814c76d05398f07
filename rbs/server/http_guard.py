"""The jobs API's HTTP edge: connection caps, header and idle timeouts, bounded request bodies.

aiohttp parses HTTP and bounds line and header sizes, but it waits forever for a
request head sent at 1 byte/s and takes any number of connections. So the listening
socket here hands each connection to a `_Guarded` protocol around aiohttp's own:

- at most `[http] max_connections` open at once, and `max_connections_per_client` from
  one address; one more is answered 503 and closed before aiohttp sees it;
- a request head must arrive whole within `header_timeout` of its first byte, else
  408 and the connection is closed (a slow sender never ties up a handler);
- a connection with no request in flight is closed after `idle_timeout` (aiohttp's
  keep-alive timeout, set to the same value);
- JSON bodies (`read_json`) are at most `max_json_body` bytes (413, read no further),
  arrive whole within `body_timeout` (408), and nest at most `max_json_depth` deep
  (400); a streamed blob upload must keep moving (`body_timeout` between chunks).

Every refusal is a JSON error document with the status, as for any other error, and a
connection whose body was not read is closed after the answer. docs/design/security.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_runner import TCPSite

from rbs.server.edge_config import HttpConfig
from rbs.wire import jobs_api
from rbs.wire.auth import RefusalLog
from rbs.wire.errors import InvalidRequest
from rbs.wire.limits import json_depth

log = logging.getLogger(__name__)


class HttpRefusal(Exception):
    """A request refused at the HTTP level (413, 408): answered, then the connection closed."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _raw_answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps(jobs_api.error_doc(code, message)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class _Connections:
    """The open connections, counted in all and per client address."""

    def __init__(self, config: HttpConfig) -> None:
        self.config = config
        self.total = 0
        self.per_client: Counter[str] = Counter()
        self.by_transport: dict[asyncio.BaseTransport, _Guarded] = {}
        # At most 10 lines a minute however many clients are refused (rbs.wire.auth).
        self.refusals = RefusalLog()

    def refusal(self, client: str) -> str | None:
        c = self.config
        if self.total >= c.max_connections:
            return f"the server holds its limit of {c.max_connections} connections"
        if self.per_client[client] >= c.max_connections_per_client:
            return (
                f"{client} holds its limit of {c.max_connections_per_client} connections "
                "to this server; close some (or raise [http] max_connections_per_client)"
            )
        return None


class _Guarded(asyncio.Protocol):
    """aiohttp's protocol for one connection, behind the caps and the header timeout."""

    def __init__(self, inner: asyncio.Protocol, conns: _Connections) -> None:
        self.inner = inner
        self.conns = conns
        self.transport: asyncio.Transport | None = None
        self.client = "?"
        self.counted = False
        self.busy = False
        self.head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        refused = self.conns.refusal(self.client)
        if refused is not None:
            self.conns.refusals.refused("a connection", self.client, refused)
            transport.write(
                _raw_answer(503, "Service Unavailable", "UNAVAILABLE", refused + "; retry later")
            )
            transport.close()
            return
        self.counted = True
        self.conns.total += 1
        self.conns.per_client[self.client] += 1
        self.conns.by_transport[transport] = self
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if not self.counted:
            return
        self.counted = False
        self.conns.total -= 1
        self.conns.per_client[self.client] -= 1
        if self.conns.per_client[self.client] <= 0:
            del self.conns.per_client[self.client]
        if self.transport is not None:
            self.conns.by_transport.pop(self.transport, None)
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            return
        if not self.busy and self.head_timer is None:
            loop = asyncio.get_running_loop()
            self.head_timer = loop.call_later(self.conns.config.header_timeout, self._head_too_slow)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.counted else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # The guard's middleware marks where each request's head ends and its answer ends.
    def request_started(self) -> None:
        self.busy = True
        self._cancel_head_timer()

    def request_ended(self) -> None:
        self.busy = False

    def _cancel_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_too_slow(self) -> None:
        self.head_timer = None
        if self.busy or self.transport is None or self.transport.is_closing():
            return
        timeout = self.conns.config.header_timeout
        self.conns.refusals.refused("a request", self.client, f"no whole head in {timeout:g} s")
        self.transport.write(
            _raw_answer(
                408,
                "Request Timeout",
                "DEADLINE_EXCEEDED",
                f"the request head did not arrive within {timeout:g} s",
            )
        )
        self.transport.close()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpGuard:
    """One server's limits: the listening site, the middleware and the body readers."""

    def __init__(self, config: HttpConfig | None = None) -> None:
        self.config = config or HttpConfig()
        self.conns = _Connections(self.config)

    @property
    def open_connections(self) -> int:
        return self.conns.total

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        guarded = self.conns.by_transport.get(request.transport) if request.transport else None
        if guarded is not None:
            guarded.request_started()
        try:
            return await handler(request)
        except HttpRefusal as e:
            resp = web.json_response(jobs_api.error_doc(e.code, str(e)), status=e.status)
            resp.force_close()  # the rest of the body was never read
            return resp
        except web.HTTPException:
            raise  # aiohttp's own answers: 404 for an unknown route, 405, ...
        except Exception:
            transport = request.transport
            if transport is None or transport.is_closing() or request.writer.output_size > 0:
                raise  # the answer has begun, or the client is gone: aiohttp ends it
            # A bug, not the request's fault: logged with its traceback, answered in the
            # API's own error form rather than aiohttp's text page.
            log.exception("%s %s failed", request.method, request.path)
            return web.json_response(
                jobs_api.error_doc(
                    "INTERNAL", "the server failed on this request; its log has the details"
                ),
                status=500,
            )
        finally:
            if guarded is not None:
                guarded.request_ended()

    async def read_json(self, request: web.Request) -> Any:
        """A request's JSON body, within the size, time and depth limits."""
        c = self.config
        data = await self.read_body(request, c.max_json_body, total=True)
        depth = json_depth(data)
        if depth > c.max_json_depth:
            raise InvalidRequest(
                f"request body nests {depth} levels deep; the limit is {c.max_json_depth}"
            )
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:
            raise InvalidRequest(f"request body is not JSON: {e}") from None

    async def read_body(self, request: web.Request, limit: int, *, total: bool) -> bytes:
        """The whole body, at most `limit` bytes (413 above): within `body_timeout` in
        all when `total`, else with no gap between chunks longer than that (408)."""
        if request.content_length is not None and request.content_length > limit:
            raise _too_large(request.content_length, limit)
        if request.content.at_eof():
            # Read already (aiohttp keeps what `request.read()` read), or empty.
            data = await request.read()
            if len(data) > limit:
                raise _too_large(len(data), limit)
            return data
        chunks: list[bytes] = []
        size = 0
        timeout = self.config.body_timeout
        try:
            async with asyncio.timeout(timeout if total else None):
                while True:
                    chunk = await (
                        request.content.read(65536)
                        if total
                        else asyncio.wait_for(request.content.read(65536), timeout)
                    )
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > limit:
                        raise _too_large(size, limit)
                    chunks.append(chunk)
        except TimeoutError:
            raise HttpRefusal(
                408,
                "DEADLINE_EXCEEDED",
                f"the request body did not arrive within {timeout:g} s"
                + ("" if total else " of the previous chunk"),
            ) from None
        return b"".join(chunks)

    async def chunk(self, request: web.Request, size: int) -> bytes:
        """The next piece of a streamed body (b"" at its end); 408 after a stall."""
        timeout = self.config.body_timeout
        try:
            return await asyncio.wait_for(request.content.read(size), timeout)
        except TimeoutError:
            raise HttpRefusal(
                408, "DEADLINE_EXCEEDED", f"the request body stalled for {timeout:g} s"
            ) from None

    def site(self, runner: web.AppRunner, host: str, port: int, ssl_context: Any = None) -> TCPSite:
        return _GuardedSite(runner, host, port, ssl_context=ssl_context, guard=self)


def _too_large(size: int, limit: int) -> HttpRefusal:
    return HttpRefusal(
        413, "PAYLOAD_TOO_LARGE", f"request body of {size} bytes is over the limit of {limit}"
    )


class _GuardedSite(TCPSite):
    """aiohttp's TCP site, with each connection behind the guard."""

    __slots__ = ("_guard",)

    def __init__(self, *args: Any, guard: HttpGuard, **kw: Any) -> None:
        super().__init__(*args, reuse_address=True, reuse_port=False, **kw)
        self._guard = guard

    async def start(self) -> None:
        await super(TCPSite, self).start()  # BaseSite's bookkeeping, not TCPSite's server
        loop = asyncio.get_running_loop()
        factory = self._runner.server
        assert factory is not None
        conns = self._guard.conns
        self._server = await loop.create_server(
            lambda: _Guarded(factory(), conns),
            self._host,
            self._port,
            ssl=self._ssl_context,
            ssl_handshake_timeout=self._guard.config.header_timeout if self._ssl_context else None,
            backlog=self._backlog,
            reuse_address=True,
            reuse_port=False,
        )
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]
