"""A job's telemetry charts on its dashboard page: the chart container, the samples it
polls (/ui/jobs/ID/telemetry), and uPlot served from the package with its licence."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "jobs"))

from dashboard_client import Browser, external_refs
from job_cluster_fixtures import one_worker_cluster
from jobs_harness import JobCluster, wait_for

pytestmark = pytest.mark.timeout(240)

BURN = (
    "import os, sys\n"
    "data = bytearray(b'x') * (16 << 20)\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    sum(range(20000))\n"
)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JobCluster]:
    # The worker's run supervisor reads the sampling interval from its environment.
    monkeypatch.setenv("RBS_TELEMETRY_INTERVAL", "0.5")
    with one_worker_cluster(tmp_path) as c:
        yield c


def test_job_page_charts_poll_the_samples_and_ship_uplot(
    cluster: JobCluster, tmp_path: Path
) -> None:
    client = cluster.client()
    stop = tmp_path / "stop"
    job = client.submit(["python3", "-c", BURN, str(stop)], name="burner")
    try:
        wait_for("two samples", lambda: len(client.telemetry(job)) >= 2 or None, timeout=120)
        b = Browser(f"http://127.0.0.1:{cluster.port + 1}")
        status, _, page = b.get(f"/ui/jobs/{job}")
        assert status == 200
        charts = re.search(r'<div id="charts" ([^>]*)></div>', page)
        assert charts, "the job page has no chart container"
        assert f'data-src="/ui/jobs/{job}/telemetry"' in charts.group(1)
        assert "data-done" not in charts.group(1)  # running: the charts keep polling
        assert '<script src="/ui/static/uPlot.iife.min.js"></script>' in page
        assert '<link rel="stylesheet" href="/ui/static/uPlot.min.css">' in page

        status, _, text = b.get(f"/ui/jobs/{job}/telemetry?points=300")
        assert status == 200
        samples = json.loads(text)["samples"]
        assert len(samples) >= 2 and all("cpu" in s and "mem" in s for s in samples)
        assert samples == sorted(samples, key=lambda s: s["t"])
        status, _, text = b.get(f"/ui/jobs/{job}/telemetry?points=0")
        assert status == 400 and "must be from 1 to 100000" in text
    finally:
        stop.touch()
    assert cluster.wait(job).state == "COMPLETED"
    _, _, page = b.get(f"/ui/jobs/{job}")
    assert re.search(r'<div id="charts" [^>]*data-done', page)  # ended: one last read
    status, _, text = b.get("/ui/jobs/99999/telemetry")
    assert status == 404

    status, _, script = b.get("/ui/static/uPlot.iife.min.js")
    assert status == 200 and script.startswith("/*! https://github.com/leeoniya/uPlot")
    assert "var uPlot=" in script
    status, _, css = b.get("/ui/static/uPlot.min.css")
    assert status == 200 and ".uplot" in css
    status, _, licence = b.get("/ui/static/uPlot.LICENSE.txt")
    assert status == 200 and "The MIT License" in licence and "Leon Sorokin" in licence
    assert 'href="/ui/static/uPlot.LICENSE.txt"' in page

    # Nothing the page names leaves the server, and all of it is served.
    assert external_refs(page) == []
    for ref in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', page):
        assert b.get(ref)[0] == 200, ref
