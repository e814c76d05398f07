"""Suite-wide test settings: under CI, every hypothesis test draws the same examples;
chaos tests' counts are printed in the run's summary."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from chaos import RECORDED, Counts
from hypothesis import settings

# A CI run must not pass or fail by the luck of a random seed; locally the default
# profile keeps exploring new examples on every run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def chaos_counts(request: pytest.FixtureRequest) -> Callable[[Counts], None]:
    """Record a chaos test's counts (lost, ran twice, overlapping) for the summary."""

    def record(counts: Counts) -> None:
        RECORDED.append((request.node.nodeid, counts))

    return record


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RECORDED:
        return
    terminalreporter.section("chaos counts")
    for nodeid, counts in RECORDED:
        terminalreporter.write_line(f"{nodeid}: {counts.summary()}")
