"""`rbs job submit`'s fast argument path agrees with the click command, or defers to it."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from rbs.cli.job import job
from rbs.cli.job_submit import SUBMIT_FLAGS, fast_submit_args, param_name
from rbs.cli.root import CONTEXT_SETTINGS, cli

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
    ["submit", "--manifest=m.job.json", "--priority=-3", "--", "x"],
    ["submit", "--tls-ca", "ca.pem", "--", "x"],
    ["submit", "--restarts", "0", "--follow", "--", "x"],
    ["submit", "-f", "--restarts=3", "--deadline", "now+1h", "--", "x"],
    ["submit", "--container", "debian:12", "--network=none", "--", "x"],
    ["submit", "--secret", "HF_TOKEN", "--secret=KEY=@key.txt", "--", "x"],
    ["submit", "--cpu-cores", "0-3,6", "--max-iobps=10M", "--", "x"],
    ["submit", "--begin", "tomorrow 09:00", "--schedule=30m", "--", "x"],
    ["submit", "--preemptible", "--queue", "low", "--", "x"],
    ["submit", "--interactive", "--", "x"],
    ["submit", "-i", "--name", "n", "--", "x"],
    ["submit", "-i", "--pty", "--", "bash"],
]

DEFER = [
    [],
    ["show", "1"],
    ["submit"],
    ["submit", "--"],
    ["submit", "true"],
    ["submit", "--help"],
    ["submit", "-h"],
    ["submit", "--cpu", "1", "--", "x"],  # an abbreviation: the click command's business
    ["submit", "--cpus", "--", "x"],
    ["submit", "--priority", "-1", "--", "x"],
    ["submit", "--priority", "high", "--", "x"],
    ["submit", "--wait=1", "--", "x"],
    ["submit", "--cpus"],
    ["submit", "--", "//pkg:job"],
    ["submit", "--", "--", "x"],
    ["submit", "//pkg:job", "--nodes", "2"],
]


def click_params(argv: list[str]) -> dict[str, object]:
    """The parameters the click command `rbs job submit` parses from `argv`."""
    assert argv[0] == "submit"
    # Under the root's context, as `rbs job submit` runs: it decides the help flags.
    root = click.Context(cli, info_name="rbs", **CONTEXT_SETTINGS)
    group = click.Context(job, info_name="job", parent=root)
    with job.commands["submit"].make_context("submit", argv[1:], parent=group) as ctx:
        return dict(ctx.params)


def test_same_covers_every_flag_kind() -> None:
    """Every submit flag appears in SAME, so the comparison covers each kind of flag."""
    used = {param_name(tok.partition("=")[0]) for argv in SAME for tok in argv}
    assert {param_name(flag) for flag, *_ in SUBMIT_FLAGS} <= used


def test_every_submit_flag_has_help() -> None:
    text = CliRunner().invoke(cli, ["job", "submit", "--help"], prog_name="rbs").output
    for flag, _, _, help_text in SUBMIT_FLAGS:
        assert help_text
        assert flag in text


@pytest.mark.parametrize("argv", SAME, ids=" ".join)
def test_fast_path_equals_click(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBS_REMOTE_TLS_CA", "")  # --tls-ca sets it; undone after the test
    fast = fast_submit_args(argv)
    assert fast is not None
    assert fast == click_params(argv)


@pytest.mark.parametrize("argv", DEFER, ids=" ".join)
def test_anything_else_goes_to_click(argv: list[str]) -> None:
    assert fast_submit_args(argv) is None


def test_submit_path_imports_no_click_or_argparse() -> None:
    code = (
        "import sys; from rbs.cli.job_submit import fast_submit_args; "
        "fast_submit_args(['submit', '--cpus', '1', '--', 'true']); "
        "print(sorted({'argparse', 'click', 'typing', 'shutil'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
