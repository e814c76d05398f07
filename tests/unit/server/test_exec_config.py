"""The [execution] config table: defaults, validation, and errors that name the key."""

from __future__ import annotations

import pytest

from rbs.server.config import ConfigError, config_from_dict
from rbs.server.exec_config import ExecutionConfig


def test_defaults_and_overrides() -> None:
    assert config_from_dict({}).execution == ExecutionConfig()
    cfg = config_from_dict({"execution": {"heartbeat_timeout": 12, "max_attempts": 5}})
    assert cfg.execution.heartbeat_timeout == 12 and cfg.execution.max_attempts == 5


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"heartbeat_timout": 3}, "unknown key 'heartbeat_timout'"),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"max_attempts": 2.5}, "whole number"),
        ({"heartbeat_timeout": 2, "heartbeat_interval": 5}, "must be longer than"),
        ({"default_timeout": "1h"}, "must be a number"),
    ],
)
def test_bad_values_are_config_errors(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=r"\[execution\]") as e:
        config_from_dict({"execution": table})
    assert message in str(e.value)
