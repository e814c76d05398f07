"""`rbs job submit --script` (shebang, args, #RBS/#SBATCH) and `--begin` against the embedded cluster."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

CLUSTER = EmbeddedCluster()
rbs = CLUSTER.rbs


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


def show(home: Path, job: str) -> dict[str, object]:
    r = rbs(home, "job", "show", job, "--json")
    assert r.returncode == 0, r.stderr
    info: dict[str, object] = json.loads(r.stdout)
    return info


def out_lines(home: Path, job: str) -> list[str]:
    r = rbs(home, "job", "logs", job, "--json")
    assert r.returncode == 0, r.stderr
    return [d["text"] for d in map(json.loads, r.stdout.splitlines()) if d["stream"] == "out"]


def test_a_bash_script_runs_under_bash_with_its_arguments(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "pipeline.sh"
    script.write_text(
        "#!/bin/bash\n"
        "#RBS --cpus 0.5 --time 10m\n"
        "#SBATCH --job-name=pipe --mem=64M\n"
        'set -o pipefail\necho "args: $*"; echo "shell: ${BASH_VERSION:+bash}"\n'
    )
    r = rbs(home, "job", "submit", "--wait", "--script", str(script), "one", "two words")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert out_lines(home, job) == ["args: one two words", "shell: bash"]
    info = show(home, job)
    assert info["name"] == "pipe"
    assert info["time_limit"] == "10m"


def test_a_python_script_is_named_after_itself_and_cli_flags_win(
    home: Path, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        f"#!{sys.executable}\n"
        "#SBATCH --time=5 --output=slurm-%j.out\n"
        "import os, sys\nprint(sys.argv[1:], os.environ['LR'])\n"
    )
    r = rbs(
        home, "job", "submit", "--wait", "--time", "2m", "--env", "LR=0.1",
        "--script", str(script), "--", "--epochs", "3",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"{script}:2: #SBATCH --output is not supported by rbs and is ignored" in r.stderr
    job = r.stdout.strip()
    assert out_lines(home, job) == ["['--epochs', '3'] 0.1"]
    info = show(home, job)
    assert info["name"] == "train.py"
    assert info["provenance"]["time_limit"] == "flag --time"  # type: ignore[index]


def test_a_missing_interpreter_and_a_relative_program_are_refused(
    home: Path, tmp_path: Path
) -> None:
    script = tmp_path / "x.sh"
    script.write_text("#!/usr/bin/env no-such-shell-rbs\necho\n")
    r = rbs(home, "job", "submit", "--script", str(script))
    assert r.returncode == 2 and r.stdout == ""
    assert "--script" in r.stderr and "no-such-shell-rbs" in r.stderr
    assert "Traceback" not in r.stderr

    r = rbs(home, "job", "submit", "--", "./prepare.sh")
    assert r.returncode == 2 and r.stdout == ""
    assert "nothing is shared with the job" in r.stderr
    assert "--inputs ." in r.stderr and "--script ./prepare.sh" in r.stderr


def test_begin_waits_with_reason_begintime_and_a_past_time_starts_at_once(home: Path) -> None:
    before = time.time()
    r = rbs(home, "job", "submit", "--begin", "2h", "--", "true")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    info = show(home, job)
    assert (info["state"], info["reason"]) == ("PENDING", "BeginTime")
    begin = info["manifest"]["begin_time"]  # type: ignore[index]
    assert before + 7200 - 5 <= begin <= time.time() + 7200 + 5
    r = rbs(home, "job", "show", job)
    assert "Begins" in r.stdout and "flag --begin" in r.stdout
    assert rbs(home, "job", "cancel", job).returncode == 0

    r = rbs(home, "job", "submit", "--wait", "--schedule", "now-1h", "--", "true")
    assert r.returncode == 0, r.stderr
    assert "has passed; the job may start at once" in r.stderr

    r = rbs(home, "job", "submit", "--begin", "next blue moon", "--", "true")
    assert r.returncode == 2 and "--begin 'next blue moon'" in r.stderr
    assert "tomorrow 09:00" in r.stderr and "Traceback" not in r.stderr


def test_an_empty_begin_clears_the_manifest_begin_time(home: Path, tmp_path: Path) -> None:
    manifest = {
        "apiVersion": "rbs/v1",
        "name": "later",
        "command": ["true"],
        "begin_time": time.time() + 86400,
    }
    path = tmp_path / "later.job.json"
    path.write_text(json.dumps(manifest))
    r = rbs(home, "job", "submit", "--wait", "--manifest", str(path), "--begin", "")
    assert r.returncode == 0, r.stderr
    info = show(home, r.stdout.strip())
    assert info["state"] == "COMPLETED"
    assert info["manifest"]["begin_time"] is None  # type: ignore[index]


def test_a_manifest_is_the_source_of_what_it_sets(home: Path, tmp_path: Path) -> None:
    manifest = {"apiVersion": "rbs/v1", "name": "m", "command": ["true"], "time_limit": 600}
    manifest["begin_time"] = time.time() + 86400
    path = tmp_path / "m.job.json"
    path.write_text(json.dumps(manifest))
    r = rbs(home, "job", "submit", "--manifest", str(path), "--priority", "-1")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    prov = show(home, job)["provenance"]
    source = f"manifest {path}"
    assert prov["begin_time"] == source and prov["time_limit"] == source  # type: ignore[index]
    assert prov["priority"] == "flag --priority" and prov["queue"] == "default"  # type: ignore[index]
    assert rbs(home, "job", "cancel", job).returncode == 0
