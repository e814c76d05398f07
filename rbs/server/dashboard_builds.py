"""The dashboard's Builds page: build actions in flight and queued, the action cache's hit
ratio, the CAS's size and lookups, and the most recent remote executions.

The counts come from the server's Prometheus registry (rbs.server.metrics, read with
`get_sample_value`, the same numbers `/metrics` serves) and from the worker hub; the
executions from the execution engine's operations (those it still keeps: running ones, and
finished ones for a while).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rbs.server.dashboard_pages import e, span, when

if TYPE_CHECKING:
    from rbs.server.execution import ExecutionEngine
    from rbs.server.metrics import ServerMetrics
    from rbs.server.operations import Operation

GET_RESULT = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
SHOWN_EXECUTIONS = 50


@dataclass(frozen=True, slots=True)
class BuildFigures:
    running: int
    queued: int
    ac_hits: float | None  # None: no /metrics registry on this server
    ac_misses: float | None
    cas_bytes: float | None
    cas_blobs: float | None
    cas_hits: float | None
    cas_misses: float | None


def figures(metrics: ServerMetrics | None, running: int, queued: int) -> BuildFigures:
    if metrics is None:
        return BuildFigures(running, queued, None, None, None, None, None, None)
    get = metrics.registry.get_sample_value

    def rpc(code: str) -> float:
        return get("rbs_rpc_total", {"method": GET_RESULT, "code": code}) or 0.0

    return BuildFigures(
        running=running,
        queued=queued,
        ac_hits=rpc("OK"),
        ac_misses=rpc("NOT_FOUND"),
        cas_bytes=get("rbs_cas_bytes"),
        cas_blobs=get("rbs_cas_blobs"),
        cas_hits=get("rbs_cas_lookups_total", {"result": "hit"}),
        cas_misses=get("rbs_cas_lookups_total", {"result": "miss"}),
    )


def recent(engine: ExecutionEngine | None, instances: Sequence[str]) -> list[Operation]:
    if engine is None:
        return []
    ops = [op for name in instances for op in engine.operations(name)]
    ops.sort(key=lambda op: op.updated, reverse=True)
    return ops[:SHOWN_EXECUTIONS]


def _ratio(hits: float | None, misses: float | None) -> str:
    if hits is None or misses is None:
        return "not counted"
    asked = hits + misses
    if not asked:
        return "no lookup yet"
    return f"{hits / asked:.1%} of {int(asked):,} lookups"


def _size(n: float | None) -> str:
    from rbs.units import format_size

    return "not counted" if n is None else format_size(int(n))


def builds_page(f: BuildFigures, ops: Sequence[Operation]) -> str:
    now = time.time()
    rows = "".join(
        "<tr>"
        f"<td><code>{e(op.action_digest.hash[:16])}</code>/{e(op.action_digest.size)}</td>"
        f"<td>{e(op.instance or '(default)')}</td><td>{e(op.stage.name)}</td>"
        f"<td>{e(op.worker_id or '-')}</td><td>{e(when(op.created))}</td>"
        f"<td>{e(span(op.created, op.updated if op.done else None, now))}</td>"
        f'<td class="num">{e(op.attempt)}</td></tr>'
        for op in ops
    )
    blobs = "" if f.cas_blobs is None else f" in {int(f.cas_blobs):,} blobs"
    return (
        '<div class="live-part"><dl id="build-figures">'
        f"<dt>Actions running</dt><dd>{e(f.running)}</dd>"
        f"<dt>Actions queued</dt><dd>{e(f.queued)}</dd>"
        f"<dt>Action cache hits</dt><dd>{e(_ratio(f.ac_hits, f.ac_misses))}</dd>"
        f"<dt>CAS size</dt><dd>{e(_size(f.cas_bytes))}{e(blobs)}</dd>"
        f"<dt>CAS lookups held</dt><dd>{e(_ratio(f.cas_hits, f.cas_misses))}</dd></dl>"
        "<h2>Recent remote executions</h2>"
        '<table id="executions"><tr><th>Action</th><th>Instance</th><th>Stage</th>'
        '<th>Worker</th><th>Started</th><th>Took</th><th class="num">Attempt</th></tr>'
        + (rows or '<tr><td colspan="7" class="note">No remote execution kept.</td></tr>')
        + "</table></div>"
    )
