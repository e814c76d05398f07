"""The server's TLS: one certificate and key (PEM) for gRPC and the jobs API alike.

`rbs remote serve --tls-cert FILE --tls-key FILE` (or `[server] tls_cert`, `tls_key`)
serves both ports over TLS; clients trust the certificate with `--tls-ca FILE`
(RBS_REMOTE_TLS_CA) or use the system's roots with a `grpcs://` address. Without them,
tokens and data travel in clear text: README "TLS".
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc


class TlsError(ValueError):
    """A certificate or key that cannot be used; the message names the file."""


def _read(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TlsError(f"--tls-{what} {str(path)!r}: {e.strerror}") from None
    if b"-----BEGIN" not in data:
        raise TlsError(f"--tls-{what} {str(path)!r}: not a PEM file (no -----BEGIN line)")
    return data


def check_pair(cert: Path | None, key: Path | None) -> tuple[Path, Path] | None:
    """Both files or neither: TLS needs the certificate and its key."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise TlsError(f"{given} needs {missing} too: TLS takes the certificate and its key")
    return cert, key


def http_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The jobs API's server context: TLS 1.2 or later, this certificate and key."""
    _read(cert, "cert")
    _read(key, "key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as e:
        raise TlsError(
            f"--tls-cert {str(cert)!r} / --tls-key {str(key)!r}: cannot be used together: "
            f"{e.reason or e}"
        ) from None
    return ctx


def grpc_credentials(cert: Path, key: Path) -> grpc.ServerCredentials:
    """The gRPC server's credentials for the same certificate and key."""
    return grpc.ssl_server_credentials([(_read(key, "key"), _read(cert, "cert"))])
