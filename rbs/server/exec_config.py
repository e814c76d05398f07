"""The `[execution]` table of the server config: worker liveness and action time limits.

[execution]
heartbeat_interval = 5      # seconds between a worker's heartbeats
heartbeat_timeout = 30      # a worker silent this long is lost
reconnect_grace = 10        # a worker whose stream broke keeps its actions this long
max_attempts = 3            # runs of one action before its operation fails
default_timeout = 3600      # seconds, for actions that set no timeout
max_timeout = 86400         # actions asking for more are refused
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionConfig:
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 30.0
    reconnect_grace: float = 10.0
    max_attempts: int = 3
    default_timeout: float = 3600.0
    max_timeout: float = 86400.0

    def __post_init__(self) -> None:
        if self.heartbeat_interval <= 0:
            raise ValueError(f"heartbeat_interval must be positive, got {self.heartbeat_interval}")
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError(
                f"heartbeat_timeout ({self.heartbeat_timeout}) must be longer than "
                f"heartbeat_interval ({self.heartbeat_interval})"
            )
        if self.reconnect_grace < 0:
            raise ValueError(f"reconnect_grace must be >= 0, got {self.reconnect_grace}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if not 0 < self.default_timeout <= self.max_timeout:
            raise ValueError(
                "default_timeout must be positive and at most max_timeout "
                f"(got {self.default_timeout} and {self.max_timeout})"
            )


def load_execution_config(table: dict[str, Any]) -> ExecutionConfig:
    """Build the config from a TOML table; unknown keys and wrong types are errors."""
    known = {f.name: f for f in fields(ExecutionConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ValueError(f"unknown key {key!r}; known keys: {', '.join(sorted(known))}")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{key} must be a number, got {value!r}")
        if key == "max_attempts" and not isinstance(value, int):
            raise ValueError(f"max_attempts must be a whole number, got {value!r}")
        kwargs[key] = value
    return ExecutionConfig(**kwargs)
