"""The `[http]` and `[grpc]` tables of the server config: defaults, sizes, and clear errors."""

from __future__ import annotations

from typing import Any

import pytest

from rbs.server.config import Config, ConfigError, config_from_dict
from rbs.server.edge_config import GrpcConfig, HttpConfig


def test_defaults() -> None:
    c = Config()
    assert c.http == HttpConfig()
    assert c.http.max_connections == 1024 and c.http.header_timeout == 10.0
    assert c.grpc.max_concurrent_streams == 256 and c.grpc.max_metadata_size == 16 << 10


def test_tables_are_read_with_size_text() -> None:
    c = config_from_dict(
        {
            "http": {"max_connections": 10, "idle_timeout": 5, "max_json_body": "2Mi"},
            "grpc": {"max_metadata_size": "32Ki", "min_ping_interval": 1.5},
        }
    )
    assert c.http.max_connections == 10 and c.http.max_json_body == 2 << 20
    assert c.grpc.max_metadata_size == 32 << 10 and c.grpc.min_ping_interval == 1.5


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"http": {"max_connections": 0}}, "[http] max_connections must be at least 1"),
        ({"http": {"header_timeout": -1}}, "[http] header_timeout must be a positive"),
        ({"http": {"max_conections": 5}}, "unknown key 'max_conections'"),
        ({"http": {"max_connections": "many"}}, "max_connections must be a number"),
        ({"http": {"max_connections": 1.5}}, "must be a whole number"),
        ({"http": {"max_json_body": "1GB"}}, "max_json_body"),
        ({"grpc": {"max_concurrent_streams": 0}}, "[grpc] max_concurrent_streams"),
        ({"grpc": "x"}, "[grpc] must be a table"),
        ({"htp": {}}, "known tables:"),
    ],
)
def test_bad_values_name_the_table_and_key(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict(data)
    assert needle in str(e.value)


def test_tls_paths_come_as_strings() -> None:
    c = config_from_dict({"server": {"tls_cert": "/etc/rbs/c.pem", "tls_key": "/etc/rbs/k"}})
    assert str(c.server.tls_cert) == "/etc/rbs/c.pem"
    with pytest.raises(ConfigError, match="tls_key must be a path string"):
        config_from_dict({"server": {"tls_key": 3}})


def test_grpc_config_rejects_zero() -> None:
    with pytest.raises(ValueError):
        GrpcConfig(max_connection_idle=0)
