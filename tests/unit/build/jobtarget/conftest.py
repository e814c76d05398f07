"""Fixtures for job-rule analysis tests: analyse //app:job of a small workspace in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobrule_ws import PRELUDE, Analyze, write_ws

from rbs.build.api import load_and_analyze
from rbs.build.jobtarget import JobTarget, job_targets
from rbs.build.labels import Label


@pytest.fixture
def analyze_job(tmp_path: Path) -> Analyze:
    """Analyse `//app:job` declared by `build` (appended to a BUILD file after PRELUDE)."""

    def run(build: str) -> JobTarget:
        root = write_ws(tmp_path, build)
        labels, graph = load_and_analyze(root, ["//app:job"])
        jobs = job_targets(graph, labels)
        return jobs[Label(package="app", name="job")]

    return run


@pytest.fixture
def prelude_lines() -> int:
    return PRELUDE.count("\n")
