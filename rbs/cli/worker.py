"""`rbs remote worker` (run a worker daemon) and `rbs remote status` (the cluster at a glance)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from rbs.cli.remote_build import tls_ca_option

DEFAULT_SERVER = "127.0.0.1:8980"
REMOTE_ENV = "RBS_REMOTE"


def _rbs_home() -> Path:
    return Path(os.environ.get("RBS_HOME") or Path.home() / ".rbs")


def _server_option(f: Any) -> Any:
    return click.option(
        "--server",
        envvar=REMOTE_ENV,
        default=DEFAULT_SERVER,
        show_default=True,
        help=f"The server's HOST:PORT (or grpc://HOST:PORT); also ${REMOTE_ENV}.",
    )(f)


def _parse_gpus(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    if text.strip() in ("", "none"):
        return ()
    ids = tuple(g.strip() for g in text.split(","))
    if any(not g.isdigit() for g in ids):
        raise click.BadParameter(
            f"{text!r}: list GPU device ids separated by commas, e.g. 0,1 (or 'none')",
            param_hint="--gpus",
        )
    return ids


@click.command()
@_server_option
@tls_ca_option
@click.option("--cpus", type=click.IntRange(min=1), help="CPUs to offer [default: all cores].")
@click.option(
    "--memory-gb",
    type=click.FloatRange(min=0, min_open=True),
    help="Memory to offer in GiB [default: all of it].",
)
@click.option("--gpus", help="GPU device ids to offer, e.g. 0,1 [default: nvidia-smi's list].")
@click.option(
    "--build-slots", type=click.IntRange(min=0), help="Build actions at once [default: --cpus]."
)
@click.option("--job-slots", type=click.IntRange(min=0), help="Jobs at once [default: --cpus].")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Sandboxes and the local CAS cache [default: $RBS_HOME/worker].",
)
@click.option(
    "--max-cache-size",
    help="Bound the worker's local CAS cache (least recently used blobs go), e.g. 20Gi "
    "(Gi = 2^30 bytes, G = 10^9; README: Sizes and durations).",
)
@click.option("--name", default="", help="Name shown in `rbs remote status` [default: hostname].")
@click.option("--address", default="", help="Address other nodes reach this one at.")
@click.option(
    "--reconnect-timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Give up after the server has been unreachable this many seconds.",
)
@click.option(
    "--leave-jobs-running",
    is_flag=True,
    help="On SIGTERM, leave running jobs to the run supervisor: the next `rbs remote worker` "
    "on this --work-dir re-attaches to them (they stop if the lease lapses first).",
)
@click.option(
    "--run-uids",
    metavar="FIRST-LAST",
    help="Run each job and build action as its own uid from this range, e.g. 200000-265535 "
    "(as root; README: Runs and credentials) [default: as the worker's own user].",
)
@click.option(
    "--containers",
    default="auto",
    show_default=True,
    metavar="auto|podman|none|unix:///SOCKET",
    help="The engine of container jobs (--container IMAGE): auto starts a podman API service of "
    "the worker's own when podman and runc are installed; or a Docker-compatible socket.",
)
@click.option(
    "--container-cache-size",
    metavar="SIZE",
    help="Past SIZE (e.g. 20Gi), remove the least recently used images this worker's container "
    "jobs ran (never one in use) [default: no cap].",
)
@click.option(
    "--container-pull",
    type=click.Choice(["auto", "yes", "no"]),
    default="auto",
    show_default=True,
    envvar="RBS_CONTAINER_PULL",
    help="Pull an image a container job names and this worker lacks: auto (it tells the "
    "server it can while docker.io answers or its last pull worked), yes (it says it can: "
    "a private registry), no (never). Submits of an image no worker has are refused "
    "while none can pull.",
)
@click.option(
    "--telemetry-interval",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    envvar="RBS_TELEMETRY_INTERVAL",
    metavar="SECONDS",
    help="Sample each job's CPU, memory, I/O and GPU use this often (0: never).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    help="Serve this worker's Prometheus metrics at /metrics on PORT (0: a free one).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address for --metrics-port (0.0.0.0: every interface).",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help='Write {"worker_id": ..., "pid": ..., "metrics_port": ...} as JSON here once registered.',
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def worker(
    server: str,
    cpus: int | None,
    memory_gb: float | None,
    gpus: str | None,
    build_slots: int | None,
    job_slots: int | None,
    work_dir: Path | None,
    max_cache_size: str | None,
    name: str,
    address: str,
    reconnect_timeout: float,
    leave_jobs_running: bool,
    run_uids: str | None,
    containers: str,
    container_cache_size: str | None,
    container_pull: str,
    telemetry_interval: float,
    metrics_port: int | None,
    metrics_host: str,
    ready_file: Path | None,
    log_level: str,
) -> None:
    """Run a worker: register with the server and run the build actions it leases."""
    from rbs.executor.containers import ContainerSettings
    from rbs.executor.runuser import setup as run_users
    from rbs.executor.worker import WorkerConfig, WorkerError
    from rbs.units import parse_size

    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # The run supervisor this worker starts reads it (rbs.executor.telemetry).
    os.environ["RBS_TELEMETRY_INTERVAL"] = f"{telemetry_interval:g}"
    try:
        work_dir = (work_dir or _rbs_home() / "worker").absolute()  # unix:// URLs, mounts
        config = WorkerConfig(
            server=server,
            work_dir=work_dir,
            token=os.environ.get("RBS_REMOTE_TOKEN") or None,
            name=name,
            address=address,
            cpus=cpus,
            memory_bytes=int(memory_gb * (1 << 30)) if memory_gb is not None else None,
            gpu_ids=_parse_gpus(gpus),
            build_slots=build_slots,
            job_slots=job_slots,
            reconnect_timeout_s=reconnect_timeout,
            leave_jobs_running=leave_jobs_running,
            run_users=run_users(run_uids, work_dir),
            containers=ContainerSettings(
                engine=containers,
                cache_max_bytes=parse_size(container_cache_size, "--container-cache-size")
                if container_cache_size
                else None,
                pull=container_pull,
            ),
            cache_max_bytes=(
                parse_size(max_cache_size, "--max-cache-size") if max_cache_size else None
            ),
        )
        metrics = (metrics_host, metrics_port) if metrics_port is not None else None
        asyncio.run(_run_worker(config, ready_file, metrics))
    except (ValueError, WorkerError, OSError) as e:
        raise click.ClickException(str(e)) from None


async def _run_worker(
    config: Any, ready_file: Path | None, metrics: tuple[str, int] | None = None
) -> None:
    from rbs.executor.worker import Worker

    w = Worker(config)
    metrics_runner, metrics_port = None, None
    if metrics is not None:
        from rbs.executor.metrics import serve_metrics

        metrics_runner, metrics_port = await serve_metrics(w, *metrics)
        click.echo(f"rbs remote worker: metrics at http://{metrics[0]}:{metrics_port}/metrics")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, w.stop)
    task = asyncio.create_task(w.run())
    connected = asyncio.create_task(w.connected.wait())
    await asyncio.wait({task, connected}, return_when=asyncio.FIRST_COMPLETED)
    if connected.done():
        r = w.register
        click.echo(
            f"rbs remote worker: {r.worker_id} registered with {config.server} "
            f"({r.cpus} cpus, {r.memory_bytes / (1 << 30):.1f} GiB, "
            f"{r.build_slots} build slots, {r.job_slots} job slots)"
        )
        sys.stdout.flush()
        if ready_file is not None:
            tmp = ready_file.with_name(f".{ready_file.name}.{os.getpid()}.tmp")
            doc = {"worker_id": r.worker_id, "pid": os.getpid(), "metrics_port": metrics_port}
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, ready_file)
    else:
        connected.cancel()
    try:
        await task
    finally:
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        if ready_file is not None and ready_file.exists():
            ready_file.unlink()


@click.command()
@click.option(
    "--server",
    envvar=REMOTE_ENV,
    help=f"The server's HOST:PORT; also ${REMOTE_ENV} [default: the local cluster under "
    f"$RBS_HOME when it runs, else {DEFAULT_SERVER}].",
)
@tls_ca_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def status(server: str | None, as_json: bool) -> None:
    """Show workers (resources, slots, last heartbeat), queue depth, running actions, jobs."""
    if not server:
        from rbs.client.local import running_local

        local = running_local()
        server = local.address if local is not None else DEFAULT_SERVER
    import grpc

    from rbs.wire.auth import token_from_env
    from rbs.wire.reapi_client import connect
    from rbs.wire.workers_status import query_status, status_dict

    try:
        channel = connect(server)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    try:
        reply = query_status(channel, token=token_from_env(), timeout=10)
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else grpc.StatusCode.UNKNOWN
        hint = {
            grpc.StatusCode.UNAVAILABLE: " (is `rbs remote serve` running there?)",
            grpc.StatusCode.UNAUTHENTICATED: " (set RBS_REMOTE_TOKEN to the server's token)",
            grpc.StatusCode.UNIMPLEMENTED: " (the server does not run remote execution)",
        }.get(code, "")
        details = e.details() if isinstance(e, grpc.Call) else str(e)
        raise click.ClickException(f"cannot get status from {server}: {details}{hint}") from None
    finally:
        channel.close()
    if as_json:
        click.echo(json.dumps(status_dict(reply), indent=2, sort_keys=True))
        return
    _print_status(reply)


def _print_status(reply: Any) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from rbs.model import JobState

    # Light borders and one space between columns leave an 80-column terminal to the
    # cells; rich narrows only the name and GPU columns (an ellipsis), so a worker id
    # and a state are never cut.
    table = Table(
        title=f"{len(reply.workers)} worker(s)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    for col in ("worker", "name", "state", "cpus", "mem", "gpu ids", "build", "jobs", "beat"):
        if col in ("name", "gpu ids"):
            table.add_column(col, overflow="ellipsis", no_wrap=False)
        else:
            table.add_column(col, no_wrap=True)
    for w in reply.workers:
        age = (reply.now_ns - w.last_heartbeat_ns) / 1e9
        table.add_row(
            w.worker_id,
            w.name,
            w.state,
            str(w.cpus),
            f"{w.memory_bytes / (1 << 30):.1f}Gi",
            ",".join(w.gpu_ids) or "-",
            f"{w.build_slots_used}/{w.build_slots}",
            f"{w.job_slots_used}/{w.job_slots}",
            f"{age:.0f}s ago",
        )
    # Piped output (grep, CI logs) gets whole cells: rich would cut them at 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    if any(w.images for w in reply.workers):
        console.print(_images_table(reply, console.width))
    console.print(
        f"actions: {reply.queued_actions} queued, {reply.running_actions} running", highlight=False
    )
    order = {s.value: i for i, s in enumerate(JobState)}
    states = sorted(reply.jobs_by_state, key=lambda kv: (order.get(kv[0], 99), kv[0]))
    jobs = ", ".join(f"{k} {v}" for k, v in states)
    console.print(f"jobs: {jobs}", highlight=False)


def _images_table(reply: Any, width: int) -> Any:
    """Each worker's container images (their latest report): name, short id, size; only
    the names give way to `width` (an ellipsis), ids and sizes stay whole."""
    from rich import box
    from rich.table import Table

    table = Table(
        title="container images",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1),
        collapse_padding=True,
    )
    rows = [
        (
            w.worker_id,
            "yes" if w.can_pull_images else "no",
            ", ".join([n for n in i.names if "@" not in n] or list(i.names) or ["<none>"]),
            i.image_id.removeprefix("sha256:")[:12],
            f"{i.size_bytes / (1 << 20):.1f}Mi",
        )
        for w in reply.workers
        for i in sorted(w.images, key=lambda i: (i.names[:1], i.image_id))
    ]
    cols = ("worker", "pull", "image", "id", "size")
    whole = [max(len(col), *(len(r[n]) for r in rows)) for n, col in enumerate(cols)]
    left = width - sum(whole) + whole[2] - 2 * len(cols)  # a space each side of a cell
    for n, col in enumerate(cols):
        if col == "image":
            table.add_column(col, overflow="ellipsis", no_wrap=True, max_width=max(8, left))
        else:
            table.add_column(col, no_wrap=True, min_width=whole[n])
    for r in rows:
        table.add_row(*r)
    return table
