"""A small HTTP/1.1 JSON client on plain sockets, for a fast-starting job CLI.

`http.client` costs ~30 ms to import (ssl, email); this module costs about 1 ms.
It speaks just what the rbs jobs API needs: keep-alive requests with a JSON or byte
body, Content-Length or chunked responses, and a line iterator over a streamed body.

A connection to a numeric address is a socket of the C module `_socket`: the `socket`
module costs `rbs job submit` ~3 ms of start-up (it builds its enums from every
constant). A host name (getaddrinfo), TLS and sendfile(2) want a `socket.socket`, which
`_full` makes of the same descriptor when one of them comes up.
"""

from __future__ import annotations

import _socket

from rbs.client import fastjson

# Not imported from typing, which costs `rbs job submit` start-up for nothing at run
# time; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    import ssl
    from collections.abc import Iterator
    from typing import Any, BinaryIO


SEND_SLICE = 8 << 20  # bytes per sendfile(2) call of an upload, between progress reports


def login_name() -> str:
    """This process's login name (printable ASCII, or "unknown"), as the client claims it."""
    import os

    name = os.environ.get("LOGNAME") or os.environ.get("USER")
    if not name:
        try:
            import pwd

            name = pwd.getpwuid(os.getuid()).pw_name
        except (ImportError, KeyError):
            name = ""
    ok = name and name.isascii() and name.isprintable() and " " not in name
    return name if ok else "unknown"


class HttpError(Exception):
    """A non-2xx answer from the server, with its JSON error message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ConnectError(Exception):
    """The server could not be reached."""


CONNECT_HINT = (
    "check that `rbs remote serve` runs there and that --server (or RBS_REMOTE) names its gRPC port"
)


class Response:
    """A whole HTTP answer (a slotted class: dataclasses cost start-up time here)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, *, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return fastjson.loads(self.body) if self.body else None


class HttpConnection:
    """One keep-alive connection to host:port; reconnects once if the server closed it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        token: str | None = None,
        timeout: float = 60,
        name: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.timeout = timeout
        # How errors name the far end, e.g. "the jobs API of the rbs server HOST:PORT".
        self.name = name or f"the rbs server at {host}:{port}"
        self.tls = tls
        self._sock: _socket.socket | None = None
        self._buf = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._buf = b""

    def _connect(self) -> _socket.socket:
        try:
            family = _ip_family(self.host)
            if family is None:
                import socket

                s: _socket.socket = socket.create_connection(
                    (self.host, self.port), timeout=self.timeout
                )
            else:
                # A numeric address needs no getaddrinfo, which would cost a CLI call
                # the resolver's set-up and the idna codec's import.
                s = _socket.socket(family, _socket.SOCK_STREAM)
                try:
                    s.settimeout(self.timeout)
                    s.connect((self.host, self.port))
                except OSError:
                    s.close()
                    raise
            s.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            if self.tls is not None:
                s = self.tls.wrap_socket(_full(s, self.timeout), server_hostname=self.host)
        except OSError as e:
            raise ConnectError(f"cannot reach {self.name}: {_reason(e)}; {CONNECT_HINT}") from None
        self._sock = s
        self._buf = b""
        return s

    def _send(self, method: str, path: str, body: bytes | None, ctype: str) -> None:
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        # Recorded on the jobs of a server without tokens, which cannot check it.
        head.append(f"X-Rbs-User: {login_name()}")
        if body is not None:
            head.append(f"Content-Type: {ctype}")
            head.append(f"Content-Length: {len(body)}")
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")
        fresh = self._sock is None
        sock = self._sock or self._connect()
        try:
            sock.sendall(data)
        except OSError:
            if fresh:
                raise
            self.close()  # a kept-alive socket the server has closed: retry once
            self._connect().sendall(data)

    def _read_more(self) -> bytes:
        assert self._sock is not None
        chunk = self._sock.recv(65536)
        if not chunk:
            raise ConnectionError("the rbs server closed the connection mid-response")
        return chunk

    def _read_line(self) -> bytes:
        while b"\r\n" not in self._buf:
            self._buf += self._read_more()
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line

    def _read_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._buf += self._read_more() if len(self._buf) < n else b""
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _read_head(self) -> tuple[int, dict[str, str]]:
        status_line = self._read_line().decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            raise ConnectionError(f"not an HTTP answer from the rbs server: {status_line!r}")
        headers: dict[str, str] = {}
        while line := self._read_line():
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(parts[1]), headers

    def _chunks(self, headers: dict[str, str]) -> Iterator[bytes]:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self._read_line().split(b";")[0], 16)
                if size == 0:
                    while self._read_line():
                        pass
                    return
                yield self._read_exact(size)
                self._read_exact(2)
        else:
            left = int(headers.get("content-length", "0"))
            while left > 0:
                piece = self._read_exact(min(left, 1 << 20))
                left -= len(piece)
                yield piece

    def _finish(self, headers: dict[str, str]) -> None:
        if headers.get("connection", "").lower() == "close":
            self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        ctype: str = "application/octet-stream",
    ) -> Response:
        body = data
        if json_body is not None:
            body = fastjson.dumps(json_body).encode()
            ctype = "application/json"
        try:
            self._send(method, path, body, ctype)
            status, headers = self._read_head()
            payload = b"".join(self._chunks(headers))
        except (OSError, ConnectionError) as e:
            self.close()
            if isinstance(e, ConnectError):
                raise
            raise ConnectError(f"lost the connection to {self.name}: {_reason(e)}") from None
        self._finish(headers)
        resp = Response(status=status, headers=headers, body=payload)
        if status >= 300:
            raise _error(resp)
        return resp

    def upload_file(self, path: str, file_path: str, size: int) -> Response:
        """PUT a file as the body with sendfile(2): constant memory for any size."""
        from rbs.cas import transfer

        head = [
            f"PUT {path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "Content-Type: application/octet-stream",
            f"Content-Length: {size}",
        ]
        if self.token:
            head.append(f"Authorization: Bearer {self.token}")
        try:
            sock = self._sock = _full(self._sock or self._connect(), self.timeout)
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            with open(file_path, "rb") as f:
                sent = 0  # in slices, so a progress bar moves during a large file
                while sent < size and (n := sock.sendfile(f, sent, min(SEND_SLICE, size - sent))):
                    sent += n
                    transfer.advance(n)
            status, headers = self._read_head()
            payload = b"".join(self._chunks(headers))
        except (OSError, ConnectionError) as e:
            self.close()
            raise ConnectError(f"lost the connection to {self.name}: {_reason(e)}") from None
        self._finish(headers)
        resp = Response(status=status, headers=headers, body=payload)
        if status >= 300:
            raise _error(resp)
        return resp

    def download(self, path: str, out: BinaryIO) -> int:
        """GET `path` and write the body to `out` as it arrives; returns bytes written.

        A body that ends before its Content-Length (the server cut the connection) or
        stalls past the timeout is a ConnectError, never a short success."""
        try:
            self._send("GET", path, None, "")
            status, headers = self._read_head()
            if status >= 300:
                payload = b"".join(self._chunks(headers))
                self.close()
                raise _error(Response(status=status, headers=headers, body=payload))
            n = 0
            for chunk in self._chunks(headers):
                out.write(chunk)
                n += len(chunk)
        except (OSError, ConnectionError) as e:
            self.close()
            if isinstance(e, ConnectError):
                raise
            raise ConnectError(f"lost the connection to {self.name}: {_reason(e)}") from None
        self._finish(headers)
        return n

    def stream_lines(self, path: str) -> Iterator[bytes]:
        """GET `path` and yield each line of a streamed (chunked) body as it arrives."""
        self._send("GET", path, None, "")
        status, headers = self._read_head()
        if status >= 300:
            payload = b"".join(self._chunks(headers))
            self.close()
            raise _error(Response(status=status, headers=headers, body=payload))
        pending = b""
        complete = False
        try:
            for chunk in self._chunks(headers):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from lines
            if pending:
                yield pending
            complete = True
            self._finish(headers)
        finally:
            if not complete:
                self.close()  # the caller stopped mid-body: the rest would poison the next request


def _reason(e: OSError) -> str:
    """An OSError's cause without the errno prefix: `Connection refused`."""
    return e.strerror or str(e) or type(e).__name__


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """A client TLS context trusting `ca_file` (PEM), or the system's roots when None.

    ssl is imported here, not at the top: a plain-HTTP `rbs job submit` never loads it."""
    import ssl

    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ConnectError(
            f"--tls-ca {ca_file!r}: cannot read it as PEM certificates: {_reason(e)}"
        ) from None


def _full(sock: _socket.socket, timeout: float) -> socket.socket:
    """`sock` as a `socket.socket` (for TLS and sendfile), on the same descriptor."""
    import socket

    if isinstance(sock, socket.socket):
        return sock
    full = socket.socket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    full.settimeout(timeout)
    return full


def _ip_family(host: str) -> int | None:
    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, host)
        except OSError:
            continue
        return family
    return None


def _error(resp: Response) -> HttpError:
    try:
        err = fastjson.loads(resp.body)["error"]
        return HttpError(resp.status, str(err.get("code", "")), str(err.get("message", "")))
    except (ValueError, KeyError, TypeError):
        text = resp.body.decode("utf-8", "replace").strip() or f"HTTP {resp.status}"
        return HttpError(resp.status, "UNKNOWN", text)
