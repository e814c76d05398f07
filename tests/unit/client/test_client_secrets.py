"""`--secret NAME` and `--secret NAME=@FILE` read on the caller's side."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbs.client.errors import JobError
from rbs.client.secrets import read_secrets

TOKEN = "hf_abcdefgh12345"


def test_a_name_copies_the_value_from_the_environment() -> None:
    assert read_secrets(["HF_TOKEN"], environ={"HF_TOKEN": TOKEN}) == (
        ["HF_TOKEN"],
        {"HF_TOKEN": TOKEN},
    )


def test_an_unset_name_fails_saying_how_to_give_it() -> None:
    with pytest.raises(JobError, match=r"HF_TOKEN is not set .*--secret HF_TOKEN=@FILE"):
        read_secrets(["HF_TOKEN"], environ={})


def test_a_file_is_read_with_its_trailing_newline_dropped(tmp_path: Path) -> None:
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    assert read_secrets([f"T=@{f}"], environ={}) == (["T"], {"T": TOKEN})


def test_a_missing_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(JobError, match=r"--secret T=@.*No such file"):
        read_secrets([f"T=@{tmp_path / 'none'}"], environ={})


def test_a_value_on_the_command_line_is_refused_without_echoing_it() -> None:
    with pytest.raises(JobError, match="never given on the command line") as e:
        read_secrets([f"T={TOKEN}"], environ={})
    assert TOKEN not in str(e.value)


def test_short_values_are_refused() -> None:
    with pytest.raises(JobError, match="at least 8"):
        read_secrets(["T"], environ={"T": "1234567"})


def test_the_targets_names_are_read_from_the_environment_too() -> None:
    names, values = read_secrets([], ["A"], environ={"A": TOKEN})
    assert (names, values) == ([], {"A": TOKEN})
    with pytest.raises(JobError, match="the job's secrets: B is not set"):
        read_secrets([], ["B"], environ={})
