"""`[jobs] hold_depth`, once `reservation_depth`: the old name is still read, with a warning."""

from __future__ import annotations

import logging

import pytest

from rbs.scheduler.config import load_scheduler_config


def test_hold_depth_and_its_old_name(caplog: pytest.LogCaptureFixture) -> None:
    assert load_scheduler_config({"hold_depth": 7}).hold_depth == 7
    with caplog.at_level(logging.WARNING):
        assert load_scheduler_config({"reservation_depth": 2}).hold_depth == 2
    assert "reservation_depth is now called hold_depth" in caplog.text
