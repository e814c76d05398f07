"""`rbs job telemetry`'s terminal charts and `rbs job show`'s telemetry line."""

from __future__ import annotations

import pytest

from rbs.cli.job_telemetry import _charts, latest_line

SAMPLES = [
    {
        "t": 1000.0 + i,
        "cpu": 0.5 * i,
        "mem": (64 + i) << 20,
        "mem_peak": 80 << 20,
        "gpus": [{"id": "0", "util": 10 * i, "mem": 1 << 30}],
    }
    for i in range(5)
]


def test_latest_line_names_each_measure() -> None:
    line = latest_line({**SAMPLES[-1], "io_read": 2048, "io_write": 0, "task": 3})
    assert "cpu 2.00 cores" in line
    assert "mem 68.0 MiB (peak 80.0 MiB)" in line
    assert "io read 2.0 KiB written 0 B" in line
    assert "gpu 0 40%" in line and "task 3" in line


def test_a_sample_without_measures_is_just_its_time() -> None:
    assert latest_line({"t": 0.0}).count(":") == 2


def test_charts_draw_cpu_memory_and_each_gpu(capfd: pytest.CaptureFixture[str]) -> None:
    _charts(SAMPLES)
    out = capfd.readouterr().out  # plotext writes to the terminal itself
    for title in ("CPU (cores)", "memory (MiB)", "GPU 0 use (%)"):
        assert title in out
    assert out.rstrip().splitlines()[-1].startswith("latest: ")
