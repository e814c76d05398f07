"""A job's telemetry charts drawn by uPlot in chromium (under the dashboard's CSP), for
a running job on the open embedded-style cluster (no login on 127.0.0.1)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from job_cluster_fixtures import one_worker_cluster
from jobs_harness import JobCluster, wait_for
from test_dashboard_browser import _external, _until, browser, shots

__all__ = ["browser", "shots"]  # the fixtures, shared with the main browser test

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

BURN = (
    "import os, sys\n"
    "data = bytearray(b'x') * (16 << 20)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    sum(range(20000))\n"
)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobCluster]:
    monkeypatch.setenv("RBS_TELEMETRY_INTERVAL", "0.5")
    with one_worker_cluster(tmp_path) as c:
        yield c


def test_cpu_and_memory_charts_draw(
    browser: Any, shots: Path, cluster: JobCluster, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    client = cluster.client()
    stop = tmp_path / "stop"
    job = client.submit(["python3", "-c", BURN, str(stop)], name="burner")
    base = f"http://127.0.0.1:{cluster.port + 1}"
    try:
        wait_for("two samples", lambda: len(client.telemetry(job)) >= 2 or None, timeout=120)
        b = browser
        b.get(f"{base}/ui/jobs/{job}")
        for key in ("cpu", "mem"):
            _until(
                b,
                f"the {key} chart",
                lambda d, k=key: d.find_elements(By.CSS_SELECTOR, f"#chart-{k} canvas"),
            )
        titles = [e.text for e in b.find_elements(By.CSS_SELECTOR, "#charts .u-title")]
        assert titles == ["CPU (cores)", "Memory (MiB)"]  # no GPU on this job: no GPU chart
        legend = b.find_element(By.ID, "chart-mem").text
        assert "mem" in legend and "peak" in legend
        b.execute_script("document.getElementById('telemetry').scrollIntoView()")
        b.save_screenshot(str(shots / "job-telemetry.png"))
        assert _external(b, base) == []
        assert [e for e in b.get_log("browser") if e.get("level") == "SEVERE"] == []

        # Samples with GPUs (this host has none): the same page's next poll draws their
        # charts, one series per GPU.
        b.execute_script(
            "const real = window.fetch;"
            "const gpus = t => [{id: '0', util: 10 + t, mem: 1 << 30}, {id: '1', util: 50, mem: 0}];"
            "const samples = [1, 2, 3].map(t => ({t: Date.now() / 1000 - 10 + t, attempt: 1,"
            "  rank: 0, cpu: 0.5, mem: 1 << 24, mem_peak: 1 << 24, gpus: gpus(t)}));"
            "window.fetch = (u, o) => String(u).includes('/telemetry') ?"
            "  Promise.resolve({ok: true, json: async () => ({samples: samples})}) : real(u, o);"
        )
        for key in ("gpu-util", "gpu-mem"):
            _until(
                b,
                f"the {key} chart",
                lambda d, k=key: d.find_elements(By.CSS_SELECTOR, f"#chart-{k} canvas"),
            )
        legend = b.find_element(By.ID, "chart-gpu-util").text
        assert "gpu 0" in legend and "gpu 1" in legend
        titles = [e.text for e in b.find_elements(By.CSS_SELECTOR, "#charts .u-title")]
        assert titles == ["CPU (cores)", "Memory (MiB)", "GPU utilisation (%)", "GPU memory (MiB)"]
        b.save_screenshot(str(shots / "job-telemetry-gpus.png"))
        assert [e for e in b.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        stop.touch()
