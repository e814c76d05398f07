"""`rbs job submit`'s fast argument path agrees with argparse, or defers to it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rbs.cli.job import build_parser, cmd_submit, fast_submit_args

SAME = [
    ["submit", "--", "true"],
    ["submit", "--cpus", "0.1", "--memory-gb", "0.0625", "--", "true"],
    ["submit", "--cpus=2", "--name=x y", "--", "sh", "-c", "echo hi"],
    ["submit", "--priority", "5", "--gpus", "1", "--nodes=2", "--max-retries", "3", "--", "a"],
    ["submit", "--env", "A=1", "--env=B", "--inputs", "d=s", "--outputs", "o", "--", "x"],
    ["submit", "--wait", "--no-requeue", "--deps", "afterok:1", "--array", "0-9%2", "--", "x"],
    ["submit", "--server", "h:1", "--token-file", "t", "--queue", "q", "--time", "1h", "--", "x"],
    ["submit", "--checkpoint-dir", "ck", "--name", "", "--", "x", "--", "y"],
    ["submit", "--cpus", "1", "--cpus", "2", "--", "x", "--cpus", "3"],
    ["submit", "--script", "run.sh", "--", "x"],
]

DEFER = [
    [],
    ["show", "1"],
    ["submit"],
    ["submit", "--"],
    ["submit", "true"],
    ["submit", "--help"],
    ["submit", "--cpu", "1", "--", "x"],  # an abbreviation: argparse's business
    ["submit", "--cpus", "--", "x"],
    ["submit", "--priority", "-1", "--", "x"],
    ["submit", "--priority", "high", "--", "x"],
    ["submit", "--wait=1", "--", "x"],
    ["submit", "--cpus"],
    ["submit", "--", "//pkg:job"],
    ["submit", "--", "--", "x"],
    ["submit", "//pkg:job", "--nodes", "2"],
]


@pytest.mark.parametrize("argv", SAME, ids=" ".join)
def test_fast_path_equals_argparse(argv: list[str]) -> None:
    fast = fast_submit_args(argv)
    assert fast is not None
    slow = vars(build_parser().parse_args(argv))
    del slow["parser"]
    assert vars(fast) == {**slow, "func": cmd_submit}


@pytest.mark.parametrize("argv", DEFER, ids=" ".join)
def test_anything_else_goes_to_argparse(argv: list[str]) -> None:
    assert fast_submit_args(argv) is None


def test_submit_path_imports_no_argparse() -> None:
    code = (
        "import sys; from rbs.cli.job import fast_submit_args; "
        "fast_submit_args(['submit', '--cpus', '1', '--', 'true']); "
        "print(sorted({'argparse', 'typing', 'shutil'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
