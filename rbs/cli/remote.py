"""`rbs remote`: run the cluster server (REAPI cache and execution, rbs's own API)."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import sys
from pathlib import Path

import click

log = logging.getLogger(__name__)


@click.group()
def remote() -> None:
    """Run the rbs server that Bazel and rbs use as a remote cache and executor."""


def _write_ready_file(path: Path, port: int, data_dir: Path) -> None:
    # Written to a temp name and renamed, so a reader never sees a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    info = {"port": port, "http_port": port + 1, "pid": os.getpid(), "data_dir": str(data_dir)}
    tmp.write_text(json.dumps(info))
    os.replace(tmp, path)


async def _serve(config: object, ready_file: Path | None) -> None:
    from rbs.server.cluster import start_cluster
    from rbs.server.config import Config

    assert isinstance(config, Config)
    running = await start_cluster(config)
    # What the start restored (every active job, the operations) lives as long as the
    # server: frozen out of the collector's generations, a full collection walks only
    # what came later, not 100,000 restored jobs (docs/design/scheduler-scale.md).
    gc.collect()
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, running.reload_tokens)  # the tokens file
    # The ready file comes first: whoever reads the "serving" line may look for it.
    if ready_file is not None:
        _write_ready_file(ready_file, running.port, config.server.data_dir)
    auth = f"auth {running.parts.auth.describe()}"
    if config.server.tls_cert is not None:
        auth += ", TLS on both ports"
    click.echo(
        f"rbs remote: serving on {config.server.host}:{running.port} "
        f"(jobs API on port {running.http_port}; data dir {config.server.data_dir}, {auth})"
    )
    sys.stdout.flush()
    try:
        await stop.wait()
        log.info("stopping: finishing calls in flight")
    finally:
        await running.stop(grace=5.0)
        if ready_file is not None and ready_file.exists():
            ready_file.unlink()


@remote.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML config file (see docs/design/remote.md); flags override it.",
)
@click.option("--host", help="Address to listen on [default: 127.0.0.1; 0.0.0.0 for all].")
@click.option("--port", type=int, help="Port to listen on; 0 picks a free one [default: 8980].")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the CAS and the server's databases live [default: $RBS_HOME/server].",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="File holding one shared bearer token; it acts as admin and as worker.",
)
@click.option(
    "--tokens-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file of token hashes, each with a user and a role (user, admin, worker); "
    "SIGHUP reloads it. `rbs remote token add` makes entries.",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Serve gRPC and the jobs API over TLS with this certificate (PEM); needs --tls-key. "
    "Without TLS, tokens travel in clear text.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The private key (PEM) of --tls-cert.",
)
@click.option(
    "--max-cas-size",
    help="Evict least recently used blobs above this size, e.g. 50Gi "
    "(Gi = 2^30 bytes, G = 10^9; README: Sizes and durations).",
)
@click.option(
    "--instance-name",
    "instance_names",
    multiple=True,
    help='Accepted REAPI instance name besides the default "" (repeatable).',
)
@click.option(
    "--digest-function",
    "digest_functions",
    type=click.Choice(["sha256", "blake3"]),
    multiple=True,
    help="Digest function to offer and accept (repeatable) [default: sha256 and blake3].",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help='Write {"port": ...} as JSON here once the server accepts calls.',
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def serve(
    config_file: Path | None,
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    token_file: Path | None,
    tokens_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    max_cas_size: str | None,
    instance_names: tuple[str, ...],
    digest_functions: tuple[str, ...],
    ready_file: Path | None,
    log_level: str,
) -> None:
    """Serve REAPI v2 (cache; execution where enabled) until SIGTERM or Ctrl-C."""
    from rbs.server.config import (
        ConfigError,
        load_config,
        parse_digest_functions,
        with_overrides,
    )
    from rbs.server.tls import TlsError
    from rbs.units import SpecError, parse_size
    from rbs.wire.auth import TokenError

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        config = with_overrides(
            load_config(config_file),
            host=host,
            port=port,
            data_dir=data_dir,
            token_file=token_file,
            tokens_file=tokens_file,
            tls_cert=tls_cert,
            tls_key=tls_key,
            instance_names=instance_names or None,
            digest_functions=parse_digest_functions(digest_functions, "--digest-function")
            if digest_functions
            else None,
            max_size=parse_size(max_cas_size, "--max-cas-size") if max_cas_size else None,
        )
        asyncio.run(_serve(config, ready_file))
    except (ConfigError, SpecError, TokenError, TlsError, OSError) as e:
        raise click.ClickException(str(e)) from None


@remote.command()
def down() -> None:
    """Stop the local cluster that job commands start under $RBS_HOME."""
    from rbs.client.local import down as stop_local
    from rbs.client.local import local_root

    pids = stop_local()
    if pids:
        click.echo(
            f"stopped the local cluster under {local_root()} (pids {', '.join(map(str, pids))})"
        )
    else:
        click.echo(f"no local cluster is running under {local_root()}")


# Commands defined in other modules join the group here, one line each, e.g.
#   from rbs.cli.remote_worker import worker
#   remote.add_command(worker)
from rbs.cli.worker import status, worker  # noqa: E402  (joins the group defined above)

remote.add_command(worker)
remote.add_command(status)
from rbs.cli.remote_token import token  # noqa: E402

remote.add_command(token)
from rbs.cli.job_reserve import drain, resume  # noqa: E402

remote.add_command(drain)
remote.add_command(resume)
