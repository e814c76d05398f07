"""`--define`, `--config`, `--bazelrc`, `--//pkg:flag=value` and `.bazelrc` for build, test and run.

Like the remote options, these keep their values in the click context, so the build
commands take them without changing their signatures; `build_options` asks
`resolve_settings()` for the merged result: rc file options first, then the command
line's, so a flag given on the command line wins, as in Bazel.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

_KEY = "rbs.config"
# Bazel flags that rbs accepts in rc files and needs no setting for: it always behaves so,
# or the flag only changes Bazel's own output.
_NO_EFFECT = {
    "incompatible_strict_action_env",
    "verbose_failures",
    "color",
    "curses",
    "show_timestamps",
    "announce_rc",
    "progress_report_interval",
    "show_progress_rate_limit",
    "nosandbox_debug",
    "sandbox_debug",
    "enable_platform_specific_config",
    "experimental_ui_max_stdouterr_bytes",
    "noexperimental_check_output_files",
}


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta[f"{_KEY}.{param.name}"] = value
    return value


def config_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for names, help_text in (
        (("--define", "define"), "NAME=VALUE for select() and config_setting (repeatable)."),
        (("--config", "config"), "Add the options of .bazelrc's build:NAME lines (repeatable)."),
        (("--bazelrc", "bazelrc"), "Also read this rc file after the workspace's .bazelrc."),
    ):
        f = click.option(
            *names[:1],
            names[1],
            multiple=True,
            expose_value=False,
            callback=_store,
            help=help_text,
        )(f)
    f = click.option(
        "--ignore_all_rc_files",
        "--ignore-all-rc-files",
        "ignore_rc",
        is_flag=True,
        expose_value=False,
        callback=_store,
        help="Read no .bazelrc file.",
    )(f)
    return f


@dataclass(slots=True)
class Settings:
    """What rc files and the command line set for one build."""

    jobs: int | None = None
    keep_going: bool | None = None
    defines: list[tuple[str, str]] = field(default_factory=list)
    flags: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _jobs(value: str, where: str) -> int:
    if value == "auto":
        return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        raise click.UsageError(f"{where}: --jobs={value}: give a number or auto") from None
    if n < 1:
        raise click.UsageError(f"{where}: --jobs={value}: must be at least 1")
    return n


def apply_args(s: Settings, args: Sequence[tuple[str, str]]) -> None:
    """Apply Bazel-style options (`text`, `where it came from`) to `s`, in order."""
    from rbs.build.select import parse_define

    items = list(args)
    i = 0
    while i < len(items):
        text, where = items[i]
        i += 1
        name, eq, value = text.partition("=")
        takes_value = name in ("--define", "--jobs", "-j")
        if takes_value and not eq:
            if i >= len(items):
                raise click.UsageError(f"{where}: {name} needs a value")
            value, i = items[i][0], i + 1
        if name == "--define":
            try:
                s.defines.append(parse_define(value))
            except ValueError as e:
                raise click.UsageError(f"{where}: {e}") from None
        elif name in ("--jobs", "-j"):
            s.jobs = _jobs(value, where)
        elif name.startswith("-j") and name[2:].isdigit():
            s.jobs = _jobs(name[2:], where)
        elif name in ("--keep_going", "--keep-going", "-k"):
            s.keep_going = True
        elif name in ("--nokeep_going", "--nokeep-going"):
            s.keep_going = False
        elif name.startswith(("--//", "--@")):
            s.flags.append((name[2:], value if eq else "True"))
        elif name.startswith("--no//"):
            s.flags.append((name[4:], "False"))
        elif name.lstrip("-") in _NO_EFFECT:
            continue
        else:
            s.warnings.append(f"{where}: ignoring {text}: not a flag rbs knows")


def resolve_settings(command: str) -> Settings:
    """Merge rc files and command-line options for `rbs COMMAND` (build, test, run)."""
    from rbs.build.bazelrc import RcError, rc_args
    from rbs.build.workspace import find_root

    s = Settings()
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    configs = tuple(meta.get(f"{_KEY}.config") or ())
    try:
        root = find_root(Path.cwd())
        rc = rc_args(
            root,
            command,
            bazelrc=tuple(meta.get(f"{_KEY}.bazelrc") or ()),
            configs=configs,
            ignore_rc=bool(meta.get(f"{_KEY}.ignore_rc")),
        )
    except RcError as e:
        raise click.UsageError(str(e)) from None
    apply_args(s, [(a.text, a.source) for a in rc])
    apply_args(s, [(f"--define={d}", "--define") for d in meta.get(f"{_KEY}.define") or ()])
    return s
