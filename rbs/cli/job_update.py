"""`rbs job update ID --begin/--priority/--time/--queue`: change a pending job, as `scontrol update`."""

from __future__ import annotations

import sys

import click

from rbs.cli.job_submit import _begin, client_for, report, use_tls_ca


@click.command("update")
@click.option("--server", metavar="HOST:PORT", help="Cluster address (default: $RBS_REMOTE).")
@click.option("--token-file", metavar="FILE", help="File holding the cluster's token.")
@click.option(
    "--tls-ca",
    metavar="FILE",
    expose_value=False,
    callback=lambda _ctx, _param, value: use_tls_ca(value),
    help="Use TLS, trusting this CA file (PEM).",
)
@click.option(
    "--begin", "--schedule", "begin", metavar="WHEN", help='New begin time; "" clears it.'
)
@click.option("--priority", type=int, metavar="N", help="New priority (raising it takes admin).")
@click.option("--time", metavar="LIMIT", help="New time limit (beyond the queue default: admin).")
@click.option("--queue", metavar="QUEUE", help="Move the job to this queue.")
@click.argument("job_id", metavar="ID")
def update(
    server: str | None,
    token_file: str | None,
    begin: str | None,
    priority: int | None,
    time: str | None,
    queue: str | None,
    job_id: str,
) -> None:
    """Change a pending job; each change is written in the job's log."""

    def run() -> int:
        flags = {
            "--begin": _begin({"begin": begin}, "update"),
            "--priority": priority,
            "--time": time,
            "--queue": queue,
        }
        flags = {k: v for k, v in flags.items() if v is not None}
        if not flags:
            raise ValueError("nothing to change: give --begin, --priority, --time or --queue")
        with client_for(server, token_file) as client:
            info = client.update(job_id, flags)
        print(
            f"job {info.job_id}: updated ({info.state}"
            + (f", reason {info.reason})" if info.reason else ")")
        )
        return 0

    code = report("update", run)
    if code:
        sys.exit(code)
