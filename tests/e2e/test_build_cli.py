"""The `rbs build/run/test/query/clean` commands on a copy of examples/WORKSPACE."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "WORKSPACE"


def rbs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    dest = tmp_path / "ws"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    return dest


def test_build_run_query_clean(ws: Path) -> None:
    r = rbs(ws, "build", "//greet/...", "-j", "2")
    assert r.returncode == 0, r.stderr
    assert (
        ws / "rbs-out/bin/greet/banner.txt"
    ).read_text() == "== greetings ==\nHELLO\nBONJOUR\nHOLA\n"
    assert "Target //greet:count up-to-date:" in r.stderr
    again = rbs(ws / "greet", "build", "//greet/...")
    assert again.returncode == 0 and "up to date" in again.stderr
    run = rbs(ws, "run", "//greet:hello", "--", "Ada")
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("(3 words)\nHello, Ada!\n")
    q = rbs(ws, "query", "deps(//greet:count)")
    assert q.stdout.split() == [
        "//greet:count",
        "//greet:upper",
        "//greet:upper.txt",
        "//greet:words.txt",
    ]
    assert rbs(ws, "query", "//greet/...").stdout.count("\n") == 7
    assert rbs(ws, "clean").returncode == 0 and not (ws / "rbs-out").exists()


def test_test_command_summarizes_and_fails(ws: Path) -> None:
    r = rbs(ws, "test", "//greet/...")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "//greet:count_test  PASSED" in r.stdout and "2 passed, 0 failed" in r.stdout
    (ws / "greet/words.txt").write_text("just one\n")
    bad = rbs(ws, "test", "//greet:all")
    assert bad.returncode == 3
    assert (
        "//greet:count_test  FAILED" in bad.stdout
        and "//greet:greeting_test  (cached) PASSED" in bad.stdout
    )


def test_user_errors_are_one_clear_message(ws: Path) -> None:
    (ws / "greet/BUILD").write_text(
        (ws / "greet/BUILD").read_text().replace('srcs = ["words.txt"]', 'srcs = ["word.txt"]')
    )
    r = rbs(ws, "build", "//greet:count")
    assert r.returncode == 1
    assert "greet/BUILD:4:1: error:" in r.stderr and "did you mean //greet:words.txt?" in r.stderr
    assert "Traceback" not in r.stderr
    r2 = rbs(ws, "build", "//nope:x")
    assert (
        r2.returncode == 1
        and "no such package //nope" in r2.stderr
        and "Traceback" not in r2.stderr
    )
    r3 = rbs(ws.parent, "build", "//greet/...")
    assert r3.returncode == 1 and "no WORKSPACE" in r3.stderr
