"""`--remote HOST:PORT` / `--remote-cache-only` for rbs build, test and run (also $RBS_REMOTE).

The options store their values in the click context rather than in each command's
arguments, so the build commands take them without changing their signatures;
`build_options` asks `remote_backend_from_context()` for the backend to use.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

_KEY = "rbs.server"


def _store(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta[f"{_KEY}.{param.name}"] = value
    return value


def remote_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--remote-cache-only",
        "remote_cache_only",
        is_flag=True,
        expose_value=False,
        callback=_store,
        help="Run actions locally but share the --remote server's action cache.",
    )(f)
    f = click.option(
        "--remote",
        "remote",
        metavar="HOST:PORT",
        envvar="RBS_REMOTE",
        expose_value=False,
        callback=_store,
        help="Run actions on this rbs cluster and use its cache (also $RBS_REMOTE; "
        "token from $RBS_REMOTE_TOKEN).",
    )(f)
    return f


def remote_backend_from_context() -> Any:
    """The remote backend factory the options ask for, or None for a local build."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    target = ctx.meta.get(f"{_KEY}.remote")
    cache_only = bool(ctx.meta.get(f"{_KEY}.remote_cache_only"))
    if not target:
        if cache_only:
            raise click.UsageError("--remote-cache-only needs --remote HOST:PORT (or RBS_REMOTE)")
        return None
    from rbs.client.remote_runner import remote_backend
    from rbs.wire.reapi_client import parse_target

    try:
        parse_target(target)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--remote") from None
    return remote_backend(
        target, token=os.environ.get("RBS_REMOTE_TOKEN") or None, cache_only=cache_only
    )
