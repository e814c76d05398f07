"""`rbs build` and `rbs test` record their invocation on a Build Event Service: the one
`--bes-backend HOST:PORT` names, else the `--remote` server's. A failure to record is a
warning; the build's own exit code stands."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import click

from rbs.cli.remote_build import bes_target_from_context


def record_invocation(
    command: str, patterns: Sequence[str], result: Any, started: float, exit_code: int
) -> None:
    """Publish this invocation when a Build Event Service is configured. `started` is
    seconds since the epoch; `result` is run_build's BuildResult."""
    target = bes_target_from_context()
    if target is None:
        return
    import grpc

    from rbs import __version__
    from rbs.wire.bes_client import ActionFailure, Invocation, TestOutcome, publish

    rep = result.report
    graph = result.graph
    inv = Invocation(
        command=command,
        args=[command, *sys.argv[2:]],
        patterns=list(patterns),
        tool_version=f"rbs {__version__}",
        started=started,
        finished=time.time(),
        exit_code=exit_code,
        actions_executed=rep.executed,
        actions_total=rep.total,
        summary=(
            f"rbs: {rep.total} actions: {rep.executed} run, {rep.cache_hits} cache hits, "
            f"{rep.memo_hits} unchanged"
        ),
        failures=[
            ActionFailure(
                label=str(f.spec.owner),
                mnemonic=f.spec.mnemonic,
                output=f.spec.outputs[0] if f.spec.outputs else "",
                message=f.message,
            )
            for f in rep.failures
        ],
        tests=[
            TestOutcome(
                label=str(graph.actions[idx].owner), passed=code == 0, cached=cached, log=log
            )
            for idx, (code, cached, log) in rep.tests.items()
            if graph is not None
        ],
    )
    try:
        publish(target, inv, token=os.environ.get("RBS_REMOTE_TOKEN") or None)
    except (grpc.RpcError, ValueError, OSError) as e:
        detail = e.details() if isinstance(e, grpc.Call) else str(e)
        click.echo(f"rbs: warning: could not record the invocation on {target}: {detail}", err=True)
        return
    click.echo(f"rbs: invocation {inv.id} recorded on {target}", err=True)
