"""Server configuration: TOML loaded into frozen dataclasses by one small loader.

A config file has one table per concern; every key is optional and command-line
flags override the file:

    [server]
    host = "127.0.0.1"          # "0.0.0.0" to serve workers on other machines
    port = 8980                 # 0 picks a free port
    data_dir = "/var/lib/rbs"   # CAS, action cache and other state; default $RBS_HOME/server
    token_file = "/etc/rbs/token"    # one shared token: admin and worker (rbs.server.tokens)
    tokens_file = "/etc/rbs/tokens.toml"  # users, roles and token hashes; SIGHUP reloads it
    instance_names = ["ci"]     # REAPI instance names accepted besides the default ""
    digest_functions = ["sha256", "blake3"]  # what Capabilities offers and requests may use
    tls_cert = "/etc/rbs/server.pem"  # TLS on both ports, with tls_key (rbs.server.tls)
    tls_key = "/etc/rbs/server.key"

    [cas]
    max_size = "50Gi"           # evict least recently used blobs above this (sizes: rbs.units)
    max_batch_size = "4Mi"      # the batch limit advertised to clients
    lease = 10800               # seconds after its last use that a blob is never evicted
    keep_inputs = "7d"          # a job's input tree is never evicted this long (resubmit)

    [execution]                 # workers and actions (rbs.server.exec_config)
    heartbeat_timeout = 30
    max_attempts = 3

    [jobs]                      # the job scheduler (rbs.scheduler.config)
    heartbeat_timeout = 300     # lease_ttl 240 s: jobs ride out an outage that long
    queues = [
      { name = "batch" },
      { name = "gpu", priority_weight = 100, default_time = "1h", max_time = "1d" },
    ]

    [http]                      # the jobs API's caps and timeouts (rbs.server.edge_config)
    max_connections_per_client = 256

    [grpc]                      # gRPC's per-connection limits and keepalive
    max_concurrent_streams = 256

Unknown tables and keys are errors (a typo must not silently fall back to a default).
New concerns add a table: a dataclass here, a field on `Config`, and a line in
`_SECTIONS`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from rbs.model import DigestFunction
from rbs.scheduler.config import SchedulerConfig, load_scheduler_config
from rbs.server.edge_config import GrpcConfig, HttpConfig, load_edge_table
from rbs.server.exec_config import ExecutionConfig, load_execution_config
from rbs.units import SpecError, parse_duration, parse_size
from rbs.wire.limits import DEFAULT_BATCH_SIZE, MESSAGE_HEADROOM

DEFAULT_PORT = 8980
KILL_GRACE_S = 10.0


def default_data_dir() -> Path:
    """`$RBS_HOME/server`, with RBS_HOME defaulting to ~/.rbs."""
    home = os.environ.get("RBS_HOME") or "~/.rbs"
    return Path(home).expanduser() / "server"


class ConfigError(ValueError):
    """A configuration value or file is invalid; the message names it and the fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """Where and how the gRPC server listens."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    data_dir: Path = field(default_factory=default_data_dir)
    token_file: Path | None = None
    tokens_file: Path | None = None
    instance_names: tuple[str, ...] = ("",)
    # TLS for gRPC and the jobs API alike (rbs.server.tls); both or neither.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    digest_functions: tuple[DigestFunction, ...] = (DigestFunction.SHA256, DigestFunction.BLAKE3)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port {self.port} is out of range: use 0-65535 (0 picks a free one)")
        if not self.instance_names:
            raise ConfigError('instance_names is empty: list at least one, e.g. [""]')
        for name in self.instance_names:
            check_instance_name(name)
        if not self.digest_functions:
            raise ConfigError("digest_functions is empty: list sha256, blake3 or both")


@dataclass(frozen=True, slots=True, kw_only=True)
class CasConfig:
    """The content-addressed store behind the server."""

    max_size: int | None = None
    max_batch_size: int = DEFAULT_BATCH_SIZE
    # Seconds after its last use during which a blob is never evicted (Bazel's
    # remote cache assumes about 3 h).
    lease: int = 3 * 3600
    # Seconds after its submission during which a job's input tree is never evicted, so
    # that `rbs job resubmit` finds it (rbs.server.input_pins).
    keep_inputs: int = 7 * 86400

    def __post_init__(self) -> None:
        if self.max_size is not None and self.max_size <= 0:
            raise ConfigError(f"cas max_size must be positive, got {self.max_size}")
        if self.lease < 0:
            raise ConfigError(f"cas lease must be a number of seconds >= 0, got {self.lease}")
        if not 1024 <= self.max_batch_size <= 1 << 30:
            raise ConfigError(
                f"cas max_batch_size {self.max_batch_size} is out of range: use 1Ki to 1Gi"
            )

    @property
    def max_message_size(self) -> int:
        """gRPC send/receive limit: above the advertised batch limit, with headroom."""
        return self.max_batch_size + MESSAGE_HEADROOM


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """The whole server configuration, one field per TOML table."""

    server: ServerConfig = field(default_factory=ServerConfig)
    cas: CasConfig = field(default_factory=CasConfig)
    jobs: SchedulerConfig = field(default_factory=SchedulerConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    grpc: GrpcConfig = field(default_factory=GrpcConfig)

    # The job lease's timing budget (docs/design/runs.md): a worker that hears nothing
    # from the server for lease_ttl stops its runs, dead after kill_grace more, before
    # the server gives the worker up: lease_ttl + kill_grace + margin = heartbeat_timeout.
    # Derived, not set, so that no configuration can break it.

    @property
    def kill_grace(self) -> float:
        """SIGTERM to SIGKILL when a lease lapses: 10 s, less for a short timeout."""
        return min(KILL_GRACE_S, self.jobs.heartbeat_timeout / 6)

    @property
    def lease_margin(self) -> float:
        """Room for the round trip, the watchdog's check and the teardown."""
        return self.jobs.heartbeat_timeout / 6

    @property
    def lease_ttl(self) -> float:
        return self.jobs.heartbeat_timeout - self.kill_grace - self.lease_margin

    @property
    def worker_heartbeat_interval(self) -> float:
        """How often workers heartbeat: `[execution] heartbeat_interval`, or more often
        when the lease is short, so that each lease is renewed at least three times (the
        server answers every heartbeat with a renewal, and the job scheduler counts only
        what it hears)."""
        return min(self.execution.heartbeat_interval, self.lease_ttl / 3)


_RESERVED_SEGMENTS = frozenset(
    {"blobs", "uploads", "actions", "actionResults", "operations", "capabilities"}
    | {"compressed-blobs"}
)


def check_instance_name(name: str) -> str:
    """An instance name may hold '/', but no segment may be a ByteStream keyword."""
    if name == "":
        return name
    for seg in name.split("/"):
        if seg == "" or seg in _RESERVED_SEGMENTS:
            raise ConfigError(
                f"invalid instance name {name!r}: segments must be non-empty and none may be "
                f"one of {', '.join(sorted(_RESERVED_SEGMENTS))}"
            )
    return name


def parse_digest_functions(value: Any, where: str) -> tuple[DigestFunction, ...]:
    """`["sha256", "blake3"]` (either, or both) as DigestFunctions."""
    names = {f.value: f for f in DigestFunction}
    if not isinstance(value, list | tuple) or not all(v in names for v in value):
        raise ConfigError(
            f'{where} must list digest functions from "sha256", "blake3"; got {value!r}'
        )
    return tuple(dict.fromkeys(names[v] for v in value))


def _convert(section: str, key: str, value: Any) -> Any:
    where = f"[{section}] {key}"
    if key in ("max_size", "max_batch_size"):
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ConfigError(f"{where} must be a size such as 50Gi, got {value!r}")
        try:
            return parse_size(value, where)
        except SpecError as e:
            raise ConfigError(f"invalid {e}") from None
    if key in ("data_dir", "token_file", "tokens_file"):
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a path string, got {value!r}")
        return Path(value).expanduser()
    if key in ("tls_cert", "tls_key"):
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a path string, got {value!r}")
        return Path(value).expanduser()
    if key == "instance_names":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f'{where} must be a list of strings, e.g. ["", "ci"]')
        return tuple(value)
    if key == "digest_functions":
        return parse_digest_functions(value, where)
    if key == "keep_inputs":
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise ConfigError(f"{where} must be a duration such as 7d or 12h, got {value!r}")
        try:
            return parse_duration(value, where, minimum=0)
        except SpecError as e:
            raise ConfigError(f"invalid {e}") from None
    if key in ("port", "lease"):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}")
    return value


_SECTIONS: dict[str, type[ServerConfig] | type[CasConfig]] = {
    "server": ServerConfig,
    "cas": CasConfig,
}


def load_config(path: Path | None = None) -> Config:
    """Read a TOML config file (or the defaults when `path` is None)."""
    if path is None:
        return Config()
    try:
        data = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
    return config_from_dict(data, str(path))


def config_from_dict(data: dict[str, Any], source: str = "config") -> Config:
    sections: dict[str, Any] = {}
    for name, table in data.items():
        if name == "jobs":
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: [jobs] must be a table")
            try:
                sections["jobs"] = load_scheduler_config(table)
            except (SpecError, ValueError, TypeError) as e:
                raise ConfigError(f"{source}: [jobs] {e}") from None
            continue
        if name in ("http", "grpc"):
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: [{name}] must be a table")
            try:
                edge = HttpConfig if name == "http" else GrpcConfig
                sections[name] = load_edge_table(edge, table)
            except ValueError as e:
                raise ConfigError(f"{source}: [{name}] {e}") from None
            continue
        if name == "execution":
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: [execution] must be a table")
            try:
                sections["execution"] = load_execution_config(table)
            except ValueError as e:
                raise ConfigError(f"{source}: [execution] {e}") from None
            continue
        cls = _SECTIONS.get(name)
        if cls is None:
            raise ConfigError(
                f"{source}: unknown table [{name}]; known tables: "
                f"{', '.join(sorted([*_SECTIONS, 'execution', 'grpc', 'http', 'jobs']))}"
            )
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [{name}] must be a table")
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for key, value in table.items():
            if key not in known:
                raise ConfigError(
                    f"{source}: unknown key {key!r} in [{name}]; known keys: "
                    f"{', '.join(sorted(known))}"
                )
            kwargs[key] = _convert(name, key, value)
        try:
            sections[name] = cls(**kwargs)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    return Config(**sections)


def with_overrides(config: Config, **server: Any) -> Config:
    """Apply command-line values (None means "not given") over the server table."""
    cas_keys = {"max_size", "max_batch_size", "lease"}
    srv = {k: v for k, v in server.items() if v is not None and k not in cas_keys}
    cas = {k: v for k, v in server.items() if v is not None and k in cas_keys}
    return replace(
        config,
        server=replace(config.server, **srv) if srv else config.server,
        cas=replace(config.cas, **cas) if cas else config.cas,
    )
