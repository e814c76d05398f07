"""`rbs remote token add`: the token on stdout, a note on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rbs.cli.remote_token import token


@pytest.mark.parametrize(("role", "article"), [("admin", "an"), ("user", "a"), ("worker", "a")])
def test_the_note_names_the_role(tmp_path: Path, role: str, article: str) -> None:
    tokens = tmp_path / "tokens.toml"
    res = CliRunner().invoke(
        token, ["add", "--user", "u", "--role", role, "--tokens-file", str(tokens)]
    )
    assert res.exit_code == 0, res.output
    assert f"added {article} {role} token for u to {tokens}" in res.output
