"""Workers heartbeat often enough for the shorter of the two heartbeat timeouts."""

from __future__ import annotations

from rbs.server.cluster import hub_config_of
from rbs.server.config import config_from_dict


def test_the_worker_interval_follows_a_short_jobs_timeout() -> None:
    cfg = config_from_dict({"jobs": {"heartbeat_timeout": 6}})
    assert cfg.execution.heartbeat_interval == 5
    assert cfg.worker_heartbeat_interval == 2  # heard three times per timeout
    assert hub_config_of(cfg).heartbeat_interval == 2


def test_the_execution_interval_stands_when_it_is_shorter() -> None:
    cfg = config_from_dict({"execution": {"heartbeat_interval": 1}})
    assert cfg.worker_heartbeat_interval == 1
    assert config_from_dict({}).worker_heartbeat_interval == 5
