"""The `[http]` and `[grpc]` tables of the server config: what one client may hold and send.

    [http]                          # the jobs API (rbs.server.http_guard)
    max_connections = 1024          # open at once, all clients together
    max_connections_per_client = 256  # from one address
    header_timeout = 10             # seconds from a request's first byte to its whole head
    idle_timeout = 60               # seconds a connection may wait between requests
    body_timeout = 30               # seconds for a JSON body; the longest stall of an upload
    max_json_body = "1Mi"           # larger JSON bodies are refused with 413
    max_json_depth = 32             # deeper nesting is refused with 400

    [grpc]                          # REAPI and the Workers stream (rbs.server.grpc_server)
    max_concurrent_streams = 256    # calls in flight on one connection
    max_connection_idle = 600       # seconds a connection with no call stays open
    min_ping_interval = 10          # seconds; a client pinging more often is cut off
    max_metadata_size = "16Ki"      # headers of one call

Message sizes on gRPC follow `[cas] max_batch_size` (rbs.server.config.CasConfig).
docs/design/security.md says why each default is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rbs.units import parse_size


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpConfig:
    """The `[http]` table: the jobs API's connection and request limits."""

    max_connections: int = 1024
    max_connections_per_client: int = 256
    header_timeout: float = 10.0
    idle_timeout: float = 60.0
    body_timeout: float = 30.0
    max_json_body: int = 1 << 20
    max_json_depth: int = 32

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_connections_per_client", "max_json_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("header_timeout", "idle_timeout", "body_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if self.max_json_body < 1024:
            raise ValueError(f"max_json_body must be at least 1Ki, got {self.max_json_body}")


@dataclass(frozen=True, slots=True, kw_only=True)
class GrpcConfig:
    """The `[grpc]` table: per-connection limits and keepalive enforcement."""

    max_concurrent_streams: int = 256
    max_connection_idle: float = 600.0
    min_ping_interval: float = 10.0
    max_metadata_size: int = 16 << 10

    def __post_init__(self) -> None:
        if self.max_concurrent_streams < 1:
            raise ValueError("max_concurrent_streams must be at least 1")
        if not self.max_connection_idle > 0 or not self.min_ping_interval > 0:
            raise ValueError("max_connection_idle and min_ping_interval must be positive seconds")
        if self.max_metadata_size < 1024:
            raise ValueError("max_metadata_size must be at least 1Ki")


_SIZES = ("max_json_body", "max_metadata_size")


def load_edge_table(cls: type[HttpConfig] | type[GrpcConfig], table: dict[str, Any]) -> Any:
    """An `[http]` or `[grpc]` table as its dataclass; ValueError names the bad key."""
    known = {f.name: f.type for f in fields(cls)}
    kw: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ValueError(f"unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        if key in _SIZES:
            kw[key] = parse_size(value, key) if isinstance(value, str | int) else value
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be a number, got {value!r}")
        elif known[key] in ("int", int) and not isinstance(value, int):
            raise ValueError(f"{key} must be a whole number, got {value!r}")
        else:
            kw[key] = value
    return cls(**kw)
