"""The embedded local cluster's server reads `$RBS_HOME/server.toml`, as `--config` does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

CLUSTER = EmbeddedCluster(timeout=120)
rbs = CLUSTER.rbs

CONFIG = """\
[jobs]
queues = [
  { name = "low", preempt_mode = "requeue" },
  { name = "high", priority_weight = 100, preempts = ["low"] },
]
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        (home / "server.toml").write_text(CONFIG)
        yield home


def test_queues_and_preemption_come_from_rbs_home_server_toml(home: Path) -> None:
    r = rbs(home, "job", "queues", "--json")
    assert r.returncode == 0, r.stderr
    assert f"its config from {home / 'server.toml'}" in r.stderr  # the start note says so
    names = {q["name"] for q in json.loads(r.stdout)}
    assert {"batch", "low", "high"} <= names
    r = rbs(home, "job", "submit", "--queue", "low", "--preemptible", "--", "true")
    assert r.returncode == 0, r.stderr


def test_a_bad_server_toml_is_named_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "server.toml").write_text("[jobs]\nno_such_key = 1\n")
    try:
        r = rbs(tmp_path, "job", "list")
        assert r.returncode != 0 and "Traceback" not in r.stderr
        assert "server.toml" in r.stderr and "no_such_key" in r.stderr
    finally:
        rbs(tmp_path, "remote", "down")
