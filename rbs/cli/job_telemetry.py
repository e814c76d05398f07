"""`rbs job telemetry ID [--since 6h] [--points 500] [--json]`: a job's sampled CPU,
memory, I/O and GPU use (rbs.executor.telemetry takes them, rbs.server.telemetry keeps
and buckets them). On a terminal: small charts (plotext, imported only here); else, or
with --json, one JSON object per sample and line. `latest_line` is `rbs job show`'s.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from rbs.cli.job_submit import client_for, report, use_tls_ca
from rbs.units import human_size

CHART_HEIGHT = 8


def _cpu(s: Mapping[str, Any]) -> str:
    return f"cpu {s['cpu']:.2f} cores" if isinstance(s.get("cpu"), int | float) else ""


def latest_line(s: Mapping[str, Any]) -> str:
    """One sample in a line: `12:00:15  cpu 1.02 cores  mem 96 MiB (peak 120 MiB) ...`."""
    parts = [time.strftime("%H:%M:%S", time.localtime(float(s["t"]))), _cpu(s)]
    if isinstance(s.get("mem"), int | float):
        peak = s.get("mem_peak")
        extra = f" (peak {human_size(int(peak))})" if isinstance(peak, int | float) else ""
        parts.append(f"mem {human_size(int(s['mem']))}{extra}")
    if isinstance(s.get("io_read"), int | float):
        parts.append(
            f"io read {human_size(int(s['io_read']))} written {human_size(int(s['io_write']))}"
        )
    for g in s.get("gpus") or ():
        mem = f" {human_size(int(g['mem']))}" if isinstance(g.get("mem"), int | float) else ""
        parts.append(f"gpu {g.get('id')} {g.get('util', 0):g}%{mem}")
    if s.get("task") is not None:
        parts.append(f"task {s['task']}")
    return "  ".join(p for p in parts if p)


def _series(samples: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for s in samples:
        if isinstance(s.get(key), int | float):
            xs.append(float(s["t"]))
            ys.append(float(s[key]))
    return xs, ys


def _charts(samples: Sequence[Mapping[str, Any]]) -> None:
    import plotext as plt

    t0 = float(samples[0]["t"])
    width = min(100, shutil.get_terminal_size((80, 24)).columns)
    charts: list[tuple[str, list[float], list[float]]] = []
    for key, title, scale in (
        ("cpu", "CPU (cores)", 1.0),
        ("mem", "memory (MiB)", 1 / (1 << 20)),
    ):
        xs, ys = _series(samples, key)
        if xs:
            charts.append((title, xs, [y * scale for y in ys]))
    gpu_ids = sorted({str(g.get("id")) for s in samples for g in s.get("gpus") or ()})
    for gid in gpu_ids:
        xs, ys = [], []
        for s in samples:
            for g in s.get("gpus") or ():
                if str(g.get("id")) == gid and isinstance(g.get("util"), int | float):
                    xs.append(float(s["t"]))
                    ys.append(float(g["util"]))
        charts.append((f"GPU {gid} use (%)", xs, ys))
    fig = plt.figure  # plotext 6's figure API
    for title, xs, ys in charts:
        fig.clear()
        fig.plot_size(width, CHART_HEIGHT)
        fig.draw(fig.signal([x - t0 for x in xs], ys, marker="braille").lines())
        fig.title(title)
        fig.label("seconds since " + time.strftime("%H:%M:%S", time.localtime(t0)), axis="x")
        fig.show()
    print("latest: " + latest_line(samples[-1]))


@click.command("telemetry")
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
    "--since", metavar="DURATION", help="Only the last DURATION (e.g. 6h, 30m) [default: all]."
)
@click.option(
    "--points",
    type=click.IntRange(min=1, max=100_000),
    default=500,
    show_default=True,
    help="At most N points per run: a longer range is cut into N equal time buckets, averaged.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sample and line.")
@click.argument("job_id", metavar="ID")
def telemetry(
    server: str | None,
    token_file: str | None,
    since: str | None,
    points: int,
    as_json: bool,
    job_id: str,
) -> None:
    """A job's CPU, memory, I/O and GPU use, sampled while it ran (charts on a terminal)."""

    def run() -> int:
        from rbs.units import parse_duration

        seconds = parse_duration(since, "--since") if since is not None else None
        with client_for(server, token_file) as client:
            samples = client.telemetry(
                job_id, since=None if seconds is None else float(seconds), points=points
            )
        if as_json or not sys.stdout.isatty():
            for s in samples:
                print(json.dumps(s, sort_keys=True))
            return 0
        if not samples:
            print(
                f"job {job_id}: no telemetry samples" + (f" in the last {since}" if since else "")
            )
            return 0
        _charts(samples)
        return 0

    code = report("telemetry", run)
    if code:
        sys.exit(code)
