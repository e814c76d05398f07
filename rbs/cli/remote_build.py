"""`--remote HOST:PORT` / `--remote-cache-only` for rbs build, test and run (also $RBS_REMOTE),
with `--remote-instance-name` and `--digest-function`.

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


def tls_ca_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """`--tls-ca FILE`: trust the server's TLS certificate from FILE (RBS_REMOTE_TLS_CA)."""
    from rbs.cli.job_submit import use_tls_ca

    return click.option(
        "--tls-ca",
        metavar="FILE",
        expose_value=False,
        callback=lambda _ctx, _param, value: use_tls_ca(value),
        help="Use TLS to the server, trusting its certificate from this CA file (PEM) "
        "(also $RBS_REMOTE_TLS_CA; grpcs://HOST:PORT uses the system's roots).",
    )(f)


def remote_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = tls_ca_option(f)
    f = click.option(
        "--digest-function",
        "digest_function",
        type=click.Choice(["blake3", "sha256"]),
        default=None,
        expose_value=False,
        callback=_store,
        help="Hash actions for the --remote server with this function [default: blake3 "
        "when the server offers it, else sha256].",
    )(f)
    f = click.option(
        "--remote-instance-name",
        "remote_instance_name",
        metavar="NAME",
        default="",
        expose_value=False,
        callback=_store,
        help='The REAPI instance name to use on the --remote server [default: ""].',
    )(f)
    f = click.option(
        "--remote-cache-only",
        "remote_cache_only",
        is_flag=True,
        expose_value=False,
        callback=_store,
        help="Run actions locally but share the --remote server's action cache.",
    )(f)
    f = click.option(
        "--bes-backend",
        "bes_backend",
        metavar="HOST:PORT",
        expose_value=False,
        callback=_store,
        help="Record this invocation on this Build Event Service (an rbs server's gRPC "
        "port) [default: the --remote server].",
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


def bes_target_from_context() -> str | None:
    """Where to record the invocation: --bes-backend, else --remote, else nowhere."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    target = ctx.meta.get(f"{_KEY}.bes_backend") or ctx.meta.get(f"{_KEY}.remote")
    return str(target) if target else None


def remote_backend_from_context() -> Any:
    """The remote backend factory the options ask for, or None for a local build."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    target = ctx.meta.get(f"{_KEY}.remote")
    cache_only = bool(ctx.meta.get(f"{_KEY}.remote_cache_only"))
    instance = ctx.meta.get(f"{_KEY}.remote_instance_name") or ""
    function = ctx.meta.get(f"{_KEY}.digest_function")
    if not target:
        for flag, value in (
            ("--remote-cache-only", cache_only),
            ("--remote-instance-name", instance),
            ("--digest-function", function),
        ):
            if value:
                raise click.UsageError(f"{flag} needs --remote HOST:PORT (or RBS_REMOTE)")
        return None
    from rbs.cas.errors import CasError
    from rbs.client.remote_runner import negotiate, remote_backend
    from rbs.model import DigestFunction
    from rbs.wire.reapi_client import parse_target

    try:
        parse_target(target)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--remote") from None
    try:
        setup = negotiate(
            target,
            token=os.environ.get("RBS_REMOTE_TOKEN") or None,
            cache_only=cache_only,
            instance=instance,
            function=DigestFunction(function) if function else None,
        )
    except (CasError, ValueError) as e:
        raise click.ClickException(f"--remote {target}: {e}") from None
    return remote_backend(setup)
