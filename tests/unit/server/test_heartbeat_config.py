"""The job lease's timing budget, derived from `[jobs] heartbeat_timeout` so none breaks it."""

from __future__ import annotations

import pytest

from rbs.server.cluster import hub_config_of
from rbs.server.config import config_from_dict


@pytest.mark.parametrize("timeout", [1, 3, 6, 30, 300, 3600])
def test_a_lapsed_lease_ends_its_runs_before_the_server_requeues_them(timeout: int) -> None:
    cfg = config_from_dict({"jobs": {"heartbeat_timeout": timeout}})
    assert cfg.lease_ttl > 0 and cfg.kill_grace > 0 and cfg.lease_margin > 0
    assert cfg.lease_ttl + cfg.kill_grace + cfg.lease_margin <= timeout
    assert cfg.kill_grace <= 10
    # Renewed (one per heartbeat) at least three times per lease.
    assert cfg.worker_heartbeat_interval <= cfg.lease_ttl / 3
    hub = hub_config_of(cfg)
    assert (hub.lease_ttl, hub.kill_grace) == (cfg.lease_ttl, cfg.kill_grace)
    assert hub.heartbeat_interval == cfg.worker_heartbeat_interval


def test_the_figures_for_a_short_and_a_slurm_like_timeout() -> None:
    short = config_from_dict({"jobs": {"heartbeat_timeout": 6}})
    assert (short.lease_ttl, short.kill_grace) == (4, 1)
    assert short.worker_heartbeat_interval == pytest.approx(4 / 3)
    slurm = config_from_dict({"jobs": {"heartbeat_timeout": 300}})
    assert (slurm.lease_ttl, slurm.kill_grace, slurm.worker_heartbeat_interval) == (240, 10, 5)
    assert config_from_dict({"execution": {"heartbeat_interval": 1}}).worker_heartbeat_interval == 1


def test_the_default_is_slurms_and_build_actions_keep_theirs() -> None:
    cfg = config_from_dict({})
    assert (cfg.jobs.heartbeat_timeout, cfg.lease_ttl, cfg.kill_grace) == (300, 240, 10)
    assert cfg.execution.heartbeat_timeout == 30
