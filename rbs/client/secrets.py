"""`--secret NAME` and `--secret NAME=@FILE`: a job's secret values, read where the caller is.

A value is never typed on the command line (it would sit in the shell's history and in
`ps`): `NAME` copies it from the caller's environment and fails when it is unset, and
`NAME=@FILE` reads the file (one trailing newline dropped). A job target or a manifest
names its secrets (`secrets = ["HF_TOKEN"]`); each is read from the environment in the
same way, at every submit: the server deletes a job's values when it ends, so
submitting the same job again asks for them again.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from rbs.client.errors import JobError

MIN_CHARS = 8  # as the server requires (rbs.server.secrets)


def read_secrets(
    specs: Iterable[str], named: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """The `--secret` names given and every secret's value (those `named` by the job's
    target or manifest too); a JobError names the flag and what to do."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    flags: list[str] = []
    for spec in specs:
        name, eq, source = spec.partition("=")
        if not name:
            raise JobError(f"--secret {spec!r}: give NAME or NAME=@FILE")
        if eq and not source.startswith("@"):
            raise JobError(
                f"--secret {name}=...: a value is never given on the command line (it would "
                f"stay in the shell's history and in ps); export {name} and pass "
                f"--secret {name}, or pass --secret {name}=@FILE"
            )
        if name in values:
            raise JobError(f"--secret {name}: given twice")
        values[name] = _from_file(name, source[1:]) if eq else _from_env(name, env, "--secret")
        flags.append(name)
    for name in named:
        if name not in values:
            values[name] = _from_env(name, env, "the job's secrets")
    for name, value in values.items():
        if len(value) < MIN_CHARS:
            raise JobError(
                f"--secret {name}: the value is {len(value)} characters long; a secret needs "
                f"at least {MIN_CHARS}, since every occurrence of it is masked in the job's log"
            )
    return flags, values


def _from_env(name: str, env: Mapping[str, str], where: str) -> str:
    value = env.get(name)
    if value is None:
        raise JobError(
            f"{where}: {name} is not set in your environment; export it "
            f"or pass --secret {name}=@FILE"
        )
    return value


def _from_file(name: str, path: str) -> str:
    if not path:
        raise JobError(f"--secret {name}=@: give the file after @, e.g. {name}=@token.txt")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise JobError(f"--secret {name}=@{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise JobError(f"--secret {name}=@{path}: not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") else text
