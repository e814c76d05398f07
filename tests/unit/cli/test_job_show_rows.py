"""`rbs job show`'s rows for what a job names beyond its resources."""

from __future__ import annotations

import re

import pytest

from rbs.cli.job_views import print_show
from rbs.wire.jobs_api import JobInfo


def shown(manifest: dict[str, object], provenance: dict[str, str]) -> None:
    raw = {"state": "COMPLETED", "manifest": {"command": ["./x"], **manifest}}
    raw["provenance"] = provenance
    info = JobInfo(
        job_id="7", name="x", state="COMPLETED", reason=None, queue="batch", exit_code=0, raw=raw
    )
    print_show(info)


def test_a_container_job_shows_its_image_network_and_source(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    shown({"container": "localhost/tools:1", "network": "none"}, {"container": "target //c:j"})
    out = capsys.readouterr().out
    assert re.search(r"Container\s+localhost/tools:1, network none\s+\(target //c:j\)", out), out
    shown({}, {})
    assert "Container" not in capsys.readouterr().out
