"""`--define`, `--config`, `--bazelrc` and `.bazelrc` for `rbs build`, `test` and `run`.

Like the remote options, these keep their values in the click context, so the build
commands take them without changing their signatures; `build_options` asks
`resolve_settings()` for the merged result: rc file options first, then the command
line's, so a flag given on the command line wins, as in Bazel (rbs.build.flags).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rbs.build.flags import Settings

_KEY = "rbs.config"


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


def split_settings(ctx: click.Context, words: tuple[str, ...]) -> tuple[str, ...]:
    """Take `--//pkg:flag=value` (and `--no//pkg:flag`) build settings out of the
    patterns; any other word that looks like an option is an unknown option."""
    settings: list[str] = []
    patterns: list[str] = []
    for w in words:
        if w.startswith(("--//", "--@", "--no//")):
            settings.append(w)
        elif w.startswith("-") and w != "-":
            raise click.NoSuchOption(w.split("=", 1)[0], ctx=ctx)
        else:
            patterns.append(w)
    if not patterns:
        raise click.UsageError("give at least one target pattern, e.g. //...", ctx=ctx)
    ctx.meta[f"{_KEY}.settings"] = tuple(settings)
    return tuple(patterns)


def resolve_settings(command: str) -> Settings:
    """Merge rc files and command-line options for `rbs COMMAND` (build, test, run)."""
    from rbs.build.bazelrc import RcError
    from rbs.build.flags import rc_settings
    from rbs.build.workspace import find_root

    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    try:
        return rc_settings(
            find_root(Path.cwd()),
            command,
            bazelrc=tuple(meta.get(f"{_KEY}.bazelrc") or ()),
            configs=tuple(meta.get(f"{_KEY}.config") or ()),
            ignore_rc=bool(meta.get(f"{_KEY}.ignore_rc")),
            defines=tuple(meta.get(f"{_KEY}.define") or ()),
            settings=tuple(meta.get(f"{_KEY}.settings") or ()),
        )
    except RcError as e:
        raise click.UsageError(str(e)) from None
