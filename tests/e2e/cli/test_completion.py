"""`rbs completion SHELL` scripts, run in the real shells: commands, subcommands, flags.

bash: the script is sourced and its completion function called with COMP_WORDS and
COMP_CWORD set, as bash does on TAB. zsh: the script is sourced in `zsh -f` and its
function called with `words` and CURRENT set; zsh's `_describe` and `compadd` (which
only run inside the completion widget) are replaced by functions that print what they
are given. fish: `complete -C` asks fish itself for the completions of a command line.
Each runs the `rbs` of this checkout from a temp bin folder on PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    (["rbs", "jo"], "job"),
    (["rbs", "job", "su"], "submit"),
    (["rbs", "job", "submit", "--pri"], "--priority"),
    (["rbs", "remote", "se"], "serve"),
    (["rbs", "completion", "fi"], "fish"),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose PATH starts with an `rbs` that runs this checkout."""
    tmp = tmp_path_factory.mktemp("completion")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    rbs = bin_dir / "rbs"
    rbs.write_text(f'#!/bin/sh\nexec {sys.executable} -m rbs "$@"\n')
    rbs.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("_RBS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    # fish and zsh keep state under HOME and XDG folders: keep it in the temp folder.
    env["HOME"] = str(tmp)
    env["XDG_CONFIG_HOME"] = str(tmp / "config")
    env["XDG_DATA_HOME"] = str(tmp / "data")
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    return env


def script(env: dict[str, str], shell: str, tmp_path: Path) -> Path:
    r = subprocess.run(
        ["rbs", "completion", shell], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    path = tmp_path / f"rbs.{shell}"
    path.write_text(r.stdout)
    return path


def run_shell(argv: list[str], env: dict[str, str]) -> list[str]:
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def need(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed here (`make system-deps` installs it)")


def test_completion_prints_each_script(env: dict[str, str], tmp_path: Path) -> None:
    assert "complete -o nosort -F _rbs_completion rbs" in script(env, "bash", tmp_path).read_text()
    assert script(env, "zsh", tmp_path).read_text().startswith("#compdef rbs")
    assert "complete --no-files --command rbs" in script(env, "fish", tmp_path).read_text()


def test_an_unknown_shell_is_refused_naming_the_choices(env: dict[str, str]) -> None:
    r = subprocess.run(
        ["rbs", "completion", "tcsh"], env=env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "'tcsh'" in r.stderr and "bash" in r.stderr and "fish" in r.stderr


@pytest.mark.parametrize(("words", "expected"), CASES, ids=lambda x: " ".join(x))
def test_bash(env: dict[str, str], tmp_path: Path, words: list[str], expected: str) -> None:
    need("bash")
    path = script(env, "bash", tmp_path)
    line = (
        f"source {path}; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}; "
        'COMPREPLY=(); _rbs_completion rbs; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    assert expected in run_shell(["bash", "--norc", "--noprofile", "-c", line], env)


@pytest.mark.parametrize(("words", "expected"), CASES, ids=lambda x: " ".join(x))
def test_zsh(env: dict[str, str], tmp_path: Path, words: list[str], expected: str) -> None:
    need("zsh")
    path = script(env, "zsh", tmp_path)
    line = (
        "compdef() { :; }; "
        '_describe() { print -rl -- "${(@P)3}"; }; '
        'compadd() { print -rl -- "${(@P)5}"; }; '
        f"source {path}; words=({' '.join(words)}); CURRENT={len(words)}; _rbs_completion"
    )
    # _describe gets "value:description" pairs; compadd plain values.
    got = [item.partition(":")[0] for item in run_shell(["zsh", "-f", "-c", line], env)]
    assert expected in got


@pytest.mark.parametrize(("words", "expected"), CASES, ids=lambda x: " ".join(x))
def test_fish(env: dict[str, str], tmp_path: Path, words: list[str], expected: str) -> None:
    need("fish")
    path = script(env, "fish", tmp_path)
    line = f"source {path}; complete -C '{' '.join(words)}'"
    got = [item.partition("\t")[0] for item in run_shell(["fish", "--no-config", "-c", line], env)]
    assert expected in got
