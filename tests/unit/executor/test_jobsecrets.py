"""A run's secrets on the worker: split out of the lease's env, masked in log lines."""

from __future__ import annotations

import pytest

from rbs.executor import jobsecrets
from rbs.executor.joblog import LineSplitter

TOKEN = "s3cr3t-Value-42"


def test_split_moves_the_named_values_out_of_the_env() -> None:
    env = {"PATH": "/bin", "RBS_SECRETS": "A,B", "A": TOKEN, "B": "another-value"}
    rest, secrets = jobsecrets.split(env)
    assert rest == {"PATH": "/bin"}
    assert secrets == {"A": TOKEN, "B": "another-value"}


def test_split_without_secrets_leaves_the_env_alone() -> None:
    assert jobsecrets.split({"PATH": "/bin"}) == ({"PATH": "/bin"}, None)


def test_a_named_secret_without_a_value_fails_naming_it() -> None:
    with pytest.raises(ValueError, match="secret B"):
        jobsecrets.split({"RBS_SECRETS": "A,B", "A": TOKEN})


def test_every_occurrence_is_masked_and_other_text_kept() -> None:
    m = jobsecrets.Masker({"A": TOKEN})
    assert m.text(f"a={TOKEN} b={TOKEN}!") == "a=*** b=***!"
    assert m.text("nothing here") == "nothing here"


def test_a_multi_line_value_is_masked_line_by_line() -> None:
    m = jobsecrets.Masker({"KEY": "-----BEGIN KEY-----\nabcdefghijkl\nshort"})
    assert m.text("abcdefghijkl") == "***"
    assert m.text("-----BEGIN KEY----- here") == "*** here"
    assert m.text("short") == "short"  # under 8 characters: not masked alone


def test_the_longest_value_is_masked_first() -> None:
    m = jobsecrets.Masker({"A": "abcdefgh", "B": "abcdefgh-longer"})
    assert m.text("abcdefgh-longer") == "***"


def test_the_splitter_masks_lines_split_across_reads() -> None:
    s = jobsecrets.splitter(1024, {"A": TOKEN})
    half = len(TOKEN) // 2
    out = s.feed(f"x{TOKEN[:half]}".encode()) + s.feed(f"{TOKEN[half:]}y\nend".encode())
    out += s.finish()
    assert out == [("x***y", True), ("end", False)]


def test_without_secrets_the_plain_splitter_is_used() -> None:
    assert type(jobsecrets.splitter(1024, None)) is LineSplitter
