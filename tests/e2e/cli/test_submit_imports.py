"""A plain `rbs job submit` in a fresh process imports none of the heavy modules.

The CLI runs in shell loops, so the submit path stays on the standard library:
click (~30 ms), grpc (~70 ms), http.client (~30 ms, with ssl and email), rich and
argparse cost more than the whole call should (docs/design/jobs.md). A local cluster
that is up is found from cluster.json and /proc (rbs.client.local_state), without
rbs.client.local and the pathlib, subprocess and dataclasses it imports.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

HEAVY = ("click", "grpc", "http.client", "rich", "argparse")
# What a submit that stages nothing and names no secret does without: the socket
# module's enums (~3 ms; rbs.client.http connects with _socket), json and the re and
# enum it imports (~6 ms; rbs.client.fastjson), the progress bar's modules and the
# secrets reader.
UNNEEDED = (
    "socket",
    "json",
    "re",
    "enum",
    "rbs.cli.progress",
    "rbs.cas.transfer",
    "rbs.client.secrets",
)
# What only starting a local cluster needs.
STARTING = ("rbs.client.local", "subprocess", "pathlib", "dataclasses")


CLUSTER = EmbeddedCluster()
rbs = CLUSTER.rbs


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """RBS_HOME of an embedded local cluster, started by a first submit."""
    with CLUSTER.running(tmp_path_factory) as home:
        r = rbs(home, "job", "submit", "--", "true")
        assert r.returncode == 0, r.stderr
        yield home


def imported(importtime_stderr: str) -> set[str]:
    """The modules a `python -X importtime` run imported, from its report on stderr."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def test_plain_submit_imports_no_click_grpc_http_client_rich_or_argparse(home: Path) -> None:
    r = rbs(
        home,
        "job",
        "submit",
        "--cpus",
        "0.1",
        "--name",
        "imports",
        "--",
        "true",
        python=("-X", "importtime"),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().isdigit()
    names = imported(r.stderr)
    # The report is read right.
    assert "rbs.client.jobs" in names
    heavy = sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))
    assert heavy == []
    assert sorted(n for n in names if n in UNNEEDED) == []


def test_a_submit_to_the_running_local_cluster_does_not_import_what_starting_one_needs(
    home: Path,
) -> None:
    r = rbs(home, "job", "submit", "--name", "found", "--", "true", python=("-X", "importtime"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().isdigit()
    names = imported(r.stderr)
    assert "rbs.client.local_state" in names
    assert sorted(n for n in names if n in STARTING) == []
    # No second cluster was started: the submit went to the one the fixture started.
    assert "started a local cluster" not in r.stderr


def test_a_submit_the_fast_path_defers_still_works(home: Path) -> None:
    """`--wait=...` style and prefixes go to the click command, which submits the same way."""
    r = rbs(home, "job", "submit", "--na", "deferred", "--wait", "true")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    r = rbs(home, "job", "show", job, "--json")
    assert r.returncode == 0, r.stderr
    assert '"name": "deferred"' in r.stdout


def test_the_installed_rbs_command_imports_nothing_before_rbs(home: Path) -> None:
    """bin/rbs, not pip's launcher for a [project.scripts] entry, which imports re first."""
    script = Path(sys.executable).with_name("rbs")
    if not script.exists():
        pytest.skip("no rbs command next to this Python (rbs is not installed in its environment)")
    r = subprocess.run(
        [sys.executable, "-X", "importtime", str(script), "job", "submit", "--", "true"],
        env=CLUSTER.env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().isdigit()
    names = imported(r.stderr)
    assert "rbs.cli.main" in names
    assert sorted(n for n in names if n in UNNEEDED) == []
