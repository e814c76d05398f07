"""`rbs job show`'s rows for what a job names beyond its resources."""

from __future__ import annotations

import re
from pathlib import Path

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


def _shown_from(m: object, prov: dict[str, str], capsys: pytest.CaptureFixture[str]) -> str:
    from rbs.model import JobManifest
    from rbs.wire.manifest import manifest_to_dict

    assert isinstance(m, JobManifest)
    shown(manifest_to_dict(m), prov)
    return capsys.readouterr().out


def test_preemptible_and_container_rows_name_where_they_came_from(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rbs.build.jobtarget import target_provenance
    from rbs.build.labels import Label
    from rbs.cli.job_submit import _KINDS
    from rbs.cli.script_directives import directives
    from rbs.model import JobManifest
    from rbs.wire.manifest import apply_flags, provenance_for

    monkeypatch.setenv("COLUMNS", "200")
    # Nothing set: the scheduler's default.
    m, prov = apply_flags(None, None, {}, command=["./x"])
    out = _shown_from(m, prov, capsys)
    assert re.search(r"Preemptible\s+no\s+\(default\)", out), out
    # Flags on the command line.
    flags = {"--container": "localhost/tools:1", "--network": "none", "--preemptible": True}
    m, prov = apply_flags(None, None, flags, command=["./x"])
    out = _shown_from(m, prov, capsys)
    assert re.search(r"Preemptible\s+yes\s+\(flag --preemptible\)", out), out
    assert re.search(
        r"Container\s+localhost/tools:1, network none\s+\(flag --container; network: flag "
        r"--network\)",
        out,
    ), out
    # A job target's attributes (`container = ...`, `preemptible = True`), one flag over them.
    target = JobManifest(
        name="j", command=("./j",), container="localhost/tools:1", preemptible=True
    )
    base_prov = target_provenance(Label(package="c", name="j"))
    m, prov = apply_flags(target, base_prov, {})
    out = _shown_from(m, prov, capsys)
    assert re.search(r"Preemptible\s+yes\s+\(target //c:j\)", out), out
    assert re.search(
        r"Container\s+localhost/tools:1, network host\s+\(target //c:j; network: default\)", out
    ), out
    m, prov = apply_flags(target, base_prov, {"--container": "localhost/other:2"})
    out = _shown_from(m, prov, capsys)
    assert re.search(r"Container\s+localhost/other:2, network host\s+\(flag --container;", out)
    assert re.search(r"Preemptible\s+yes\s+\(target //c:j\)", out), out
    # A --manifest file.
    prov = provenance_for(target, "manifest j.job.json")
    out = _shown_from(target, prov, capsys)
    assert re.search(r"Preemptible\s+yes\s+\(manifest j.job.json\)", out), out
    assert re.search(r"Container\s+localhost/tools:1, network host\s+\(manifest j.job.json;", out)
    # #RBS lines of a --script, which are submit flags.
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n#RBS --preemptible --container localhost/tools:1\necho hi\n")
    _, found, _ = directives(str(script), _KINDS)
    flags = {"--" + k.replace("_", "-"): v for k, v in found.items()}
    m, prov = apply_flags(None, None, flags, command=["./run.sh"])
    out = _shown_from(m, prov, capsys)
    assert re.search(r"Preemptible\s+yes\s+\(flag --preemptible\)", out), out
    assert re.search(r"Container\s+localhost/tools:1, network host\s+\(flag --container;", out)
