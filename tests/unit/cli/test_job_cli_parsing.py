"""`rbs job` reads its command lines as it always has: argparse's rules on click."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

import rbs.cli.job as job_cli
from rbs.cli.root import cli


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, Any], str | None]]:
    """What `rbs job submit` would send: (parameters, target), instead of sending it."""
    calls: list[tuple[dict[str, Any], str | None]] = []

    def record(params: dict[str, Any], target: str | None = None) -> int:
        calls.append((dict(params), target))
        return 0

    monkeypatch.setattr(job_cli, "submit_job", record)
    return calls


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli, ["job", *args], prog_name="rbs")


def test_long_flags_take_unique_prefixes(
    submitted: list[tuple[dict[str, Any], str | None]],
) -> None:
    # `--cpu` alone is ambiguous since --cpu-cores: click names both.
    assert "could match --cpus, --cpu-cores" in run("submit", "--cpu=2", "--", "x").output
    r = run("submit", "--mem", "4", "--cpus=2", "--no-r", "--", "x")
    assert r.exit_code == 0, r.output
    params, target = submitted[0]
    assert (params["memory_gb"], params["cpus"], params["no_requeue"]) == ("4", "2", True)
    assert (params["command"], target) == (("x",), None)


def test_an_ambiguous_prefix_is_refused_naming_the_candidates() -> None:
    r = run("submit", "--no", "--", "x")
    assert r.exit_code == 2
    assert "ambiguous option: --no could match --no-requeue, --nodes" in r.output


@pytest.mark.parametrize("value", ["--wait", "--", "-x"])
def test_a_value_that_looks_like_a_flag_is_refused(value: str) -> None:
    r = run("submit", "--name", value, "--", "x")
    assert r.exit_code == 2
    assert "Option '--name' requires an argument" in r.output
    assert "--name=VALUE" in r.output


@pytest.mark.parametrize("value", ["-1", "-", "-x y"])
def test_negative_numbers_and_odd_values_are_values(
    submitted: list[tuple[dict[str, Any], str | None]], value: str
) -> None:
    r = run("submit", "--name", value, "--", "x")
    assert r.exit_code == 0, r.output
    assert submitted[0][0]["name"] == value


def test_the_command_starts_at_the_first_word_that_is_not_a_flag(
    submitted: list[tuple[dict[str, Any], str | None]],
) -> None:
    r = run("submit", "--cpus", "1", "sh", "-c", "echo hi", "--", "y")
    assert r.exit_code == 0, r.output
    assert submitted[0][0]["command"] == ("sh", "-c", "echo hi", "--", "y")


def test_flags_after_a_target_count_and_repeatable_ones_add_up(
    submitted: list[tuple[dict[str, Any], str | None]],
) -> None:
    r = run("submit", "--env", "A=1", "//pkg:job", "--env", "B=2", "--nodes", "2", "--", "a")
    assert r.exit_code == 0, r.output
    params, target = submitted[0]
    assert target == "//pkg:job"
    assert (params["env"], params["nodes"], params["command"]) == (("A=1", "B=2"), 2, ("a",))


def test_a_bad_value_after_a_target_names_the_flag() -> None:
    r = run("submit", "//pkg:job", "--nodes", "many")
    assert r.exit_code == 2
    assert "'--nodes'" in r.output and "'many'" in r.output


def test_job_errors_exit_2_with_one_line(tmp_path: Any) -> None:
    r = run("submit", "--script", str(tmp_path / "missing.sh"))
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        f"rbs job submit: error: --script {str(tmp_path / 'missing.sh')!r}: no such file"
    ]


@pytest.mark.parametrize("args", [["-h"], ["submit", "-h"], ["logs", "--help"]])
def test_help_is_the_same_style_everywhere(args: list[str]) -> None:
    r = run(*args)
    assert r.exit_code == 0
    assert r.output.startswith(f"Usage: rbs job {' '.join(args[:-1])}".rstrip())
    assert "-h, --help" in r.output
