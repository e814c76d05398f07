"""`rbs job reserve`, `rbs job reservations`, `rbs remote drain` and `rbs remote resume`.

A reservation is a maintenance window on some workers (or all): no job that would not
end before it starts, judged by its time limit, starts there; jobs already running keep
running. A drain is one with no end, from now, on one worker. Both take the admin role.
The rules live in the core (rbs.scheduler.windows), the windows on the server
(rbs.server.reservations).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any
from urllib.parse import quote

import click

from rbs.cli.job_submit import client_for, report, use_tls_ca
from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient

_COMMON = (
    click.option("--server", metavar="HOST:PORT", help="Cluster address (default: $RBS_REMOTE)."),
    click.option("--token-file", metavar="FILE", help="File holding the cluster's token."),
    click.option(
        "--tls-ca",
        metavar="FILE",
        expose_value=False,
        callback=lambda _ctx, _param, value: use_tls_ca(value),
        help="Use TLS, trusting this CA file (PEM).",
    ),
)


def _common(f: Any) -> Any:
    for option in reversed(_COMMON):
        f = option(f)
    return f


def _run(cmd: str, work: Any) -> None:
    code = report(cmd, work)
    if code:
        sys.exit(code)


def _run_remote(cmd: str, work: Any) -> None:
    """As `_run`, for `rbs remote drain` and `resume`: errors name that command."""
    try:
        work()
    except (JobError, ValueError, OSError) as e:
        print(f"rbs remote {cmd}: error: {e}", file=sys.stderr)
        sys.exit(2)


def _when(ts: float | None) -> str:
    return "never" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _describe(doc: dict[str, Any]) -> str:
    workers = ",".join(doc["workers"]) or "all workers"
    reason = f"  ({doc['reason']})" if doc.get("reason") else ""
    return f"{doc['name']}: {_when(doc['start'])} to {_when(doc['end'])} on {workers}{reason}"


def _window_body(
    name: str, begin: str | None, at: str | None, span: str | None, reason: str, workers: str
) -> dict[str, Any]:
    from rbs.cli.when import parse_begin
    from rbs.units import parse_duration

    if (begin is None) == (at is None):
        raise ValueError("give the window's start as --in DURATION (1h) or --at WHEN (23:00)")
    if span is None:
        raise ValueError("give the window's length as --for DURATION (2h, 30m)")
    now = time.time()
    if begin is not None:
        start = now + parse_duration(begin, "--in")
    else:
        assert at is not None
        start = parse_begin(at, now, flag="--at")
    return {
        "name": name,
        "start": start,
        "end": start + parse_duration(span, "--for"),
        "workers": [w for w in workers.split(",") if w],
        "reason": reason,
    }


@click.command("reserve")
@_common
@click.argument("name")
@click.option("--in", "begin", metavar="DURATION", help="Start this far from now: 1h, 30m.")
@click.option("--at", metavar="WHEN", help="Start then: 23:00, tomorrow 06:00, an ISO time.")
@click.option("--for", "span", metavar="DURATION", help="How long the window lasts: 2h.")
@click.option("--reason", default="", metavar="TEXT", help="Shown to users whose jobs wait.")
@click.option("--workers", default="", metavar="W1,W2", help="Only these workers (default all).")
@click.option("--cancel", is_flag=True, help="Cancel the reservation NAME instead.")
def reserve(
    server: str | None,
    token_file: str | None,
    name: str,
    begin: str | None,
    at: str | None,
    span: str | None,
    reason: str,
    workers: str,
    cancel: bool,
) -> None:
    """Reserve workers for maintenance: jobs that would overrun the window wait."""

    def work() -> int:
        with client_for(server, token_file) as client:
            if cancel:
                client._call("DELETE", f"/v1/reservations/{quote(name, safe='')}")
                print(f"cancelled reservation {name}")
                return 0
            body = _window_body(name, begin, at, span, reason, workers)
            print("reserved " + _describe(client._call("POST", "/v1/reservations", body)))
        return 0

    _run("reserve", work)


@click.command("reservations")
@_common
@click.option("--json", "as_json", is_flag=True, help="Print JSON for programs.")
def reservations(server: str | None, token_file: str | None, as_json: bool) -> None:
    """List maintenance reservations and drains."""

    def work() -> int:
        with client_for(server, token_file) as client:
            docs = list_reservations(client)
        for doc in docs:
            print(json.dumps(doc, sort_keys=True) if as_json else _describe(doc))
        if not docs and not as_json:
            print("no reservations", file=sys.stderr)
        return 0

    _run("reservations", work)


def list_reservations(client: JobsClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = client._call("GET", "/v1/reservations")["reservations"]
    return found


@click.command("drain")
@_common
@click.argument("worker_id", metavar="WORKER")
@click.option("--reason", default="", metavar="TEXT", help="Why (shown in reservations).")
def drain(server: str | None, token_file: str | None, worker_id: str, reason: str) -> None:
    """Start no new work on WORKER; what runs there goes on (rbs remote resume undoes it)."""

    def work() -> int:
        with client_for(server, token_file) as client:
            path = f"/v1/workers/{quote(worker_id, safe='')}/drain"
            doc = client._call("POST", path, {"reason": reason})
        print(f"draining {', '.join(doc['workers'])}")  # the id, when a name was given
        return 0

    _run_remote("drain", work)


@click.command("resume")
@_common
@click.argument("worker_id", metavar="WORKER")
def resume(server: str | None, token_file: str | None, worker_id: str) -> None:
    """Let WORKER take new work again after `rbs remote drain`."""

    def work() -> int:
        with client_for(server, token_file) as client:
            path = f"/v1/workers/{quote(worker_id, safe='')}/resume"
            doc = client._call("POST", path, {})
        print(f"resumed {str(doc['cancelled']).removeprefix('drain:')}")
        return 0

    _run_remote("resume", work)
