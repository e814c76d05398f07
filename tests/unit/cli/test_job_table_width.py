"""`rbs job list`'s table fits an 80-column terminal and never cuts an id or a state."""

from __future__ import annotations

from rbs.cli.job_table import COLUMNS, table_lines
from rbs.wire.jobs_api import JobInfo


def _job(job_id: str, state: str, name: str, reason: str | None) -> JobInfo:
    raw = {
        "user": "a-rather-long-user-name",
        "priority": {"total": 12345},
        "resources": {"cpu": "16", "memory": "64Gi", "gpus": 8},
        "workers": ["gpu-node-0001.cluster.example.org", "gpu-node-0002.cluster.example.org"],
        "submit_time": 1_700_000_000,
    }
    return JobInfo(
        job_id=job_id,
        name=name,
        state=state,
        reason=reason,
        queue="interactive-gpu",
        exit_code=None,
        raw=raw,
    )


JOBS = [
    _job("123456_[0-999%10]", "OUT_OF_MEMORY", "train-a-very-large-model-on-many-gpus", None),
    _job("7", "PENDING", "x", "Dependency: waiting for afterok:123456 to complete"),
    _job("88", "CANCELLED", "sweep", "cancelled by someone"),
]


def test_eighty_columns_keep_every_id_and_state_whole() -> None:
    lines = table_lines(JOBS, 80)
    assert all(len(line) <= 80 for line in lines), lines
    for line, job in zip(lines[1:], JOBS, strict=True):
        assert line.startswith(job.job_id + " ")
        assert f" {job.state}" in line
    assert "STATE" in lines[0]


def test_no_width_shows_every_column_as_before() -> None:
    lines = table_lines(JOBS, None)
    assert lines[0].split() == list(COLUMNS)
    assert "train-a-very-large-model-on-many-gpus" in lines[1]


def test_a_wide_terminal_cuts_less() -> None:
    narrow, wide = table_lines(JOBS, 80), table_lines(JOBS, 200)
    assert len(wide[0].split()) > len(narrow[0].split())
    assert all(len(line) <= 200 for line in wide)
