"""rbs.cli.guard: an unexpected error is one line and a hint; RBS_DEBUG=1 shows the traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BUG = "from rbs.cli.guard import guarded\ndef bug():\n    raise KeyError('boom')\nguarded(bug)\n"


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "RBS_DEBUG"}
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_unexpected_error_is_one_line_and_where_to_report() -> None:
    r = run(BUG)
    assert r.returncode == 70
    assert "Traceback" not in r.stderr
    first, hint = r.stderr.strip().splitlines()
    assert first == "rbs: internal error: KeyError: 'boom'"
    assert "report it" in hint and "RBS_DEBUG=1" in hint


@pytest.mark.parametrize("value", ["1", "yes"])
def test_rbs_debug_shows_the_traceback(value: str) -> None:
    r = run(BUG, RBS_DEBUG=value)
    assert r.returncode == 1
    assert "Traceback" in r.stderr and "KeyError: 'boom'" in r.stderr


def test_exit_codes_pass_through() -> None:
    r = run("import sys\nfrom rbs.cli.guard import guarded\nguarded(lambda: sys.exit(3))\n")
    assert r.returncode == 3
    assert r.stderr == ""


def test_ctrl_c_is_130_and_quiet() -> None:
    code = "from rbs.cli.guard import guarded\ndef f():\n    raise KeyboardInterrupt\nguarded(f)\n"
    r = run(code)
    assert r.returncode == 130
    assert r.stderr == ""
