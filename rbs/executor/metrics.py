"""A worker's own Prometheus metrics (`rbs remote worker --metrics-port`), read when scraped.

The worker serves GET /metrics on its own small HTTP listener, on 127.0.0.1 unless
`--metrics-host` says otherwise: it holds no tokens of its own to check, so by default
only the machine itself may read it. The figures are the worker's view, which the
server's /metrics cannot see: whether its stream is up, its slots as it counts them,
the runs its supervisor holds, its load. No label carries a job or lease id.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from rbs.executor.worker import Worker


class _WorkerCollector(Collector):
    def __init__(self, worker: Worker) -> None:
        self._w = worker

    def collect(self) -> Iterator[Metric]:
        w, r = self._w, self._w.register
        yield GaugeMetricFamily(
            "rbs_worker_connected",
            "1 while the worker's stream to the server is registered, else 0.",
            value=1 if w.connected.is_set() else 0,
        )
        build_used = len(w._running)  # the same count the heartbeat reports
        job_used = w.jobs.slots_used() if w.jobs is not None else 0
        for name, used, total, what in (
            ("rbs_worker_build_slots", build_used, r.build_slots, "Build-action slots"),
            ("rbs_worker_job_slots", job_used, r.job_slots, "Job slots"),
        ):
            g = GaugeMetricFamily(name, f"{what} of this worker, used and free.", labels=["state"])
            g.add_metric(["used"], used)
            g.add_metric(["free"], max(0, total - used))
            yield g
        held = len(w.jobs.held_leases()) if w.jobs is not None else 0
        yield GaugeMetricFamily(
            "rbs_worker_job_runs_held",
            "Job runs running here or ended and not yet reported to the server.",
            value=held,
        )
        yield GaugeMetricFamily("rbs_worker_cpus", "CPUs this worker offers.", value=r.cpus)
        yield GaugeMetricFamily("rbs_worker_gpus", "GPUs this worker offers.", value=len(r.gpu_ids))
        yield GaugeMetricFamily(
            "rbs_worker_memory_bytes", "Memory this worker offers.", value=r.memory_bytes
        )
        yield GaugeMetricFamily(
            "rbs_worker_load1", "The 1-minute load average.", value=os.getloadavg()[0]
        )


def worker_registry(worker: Worker) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_WorkerCollector(worker))
    return registry


async def serve_metrics(worker: Worker, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve GET /metrics for `worker` on host:port (0: a free port); the runner to clean
    up and the port bound. Raises OSError naming the address when it cannot listen."""
    registry = worker_registry(worker)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise OSError(
            f"--metrics-port: cannot listen on {host}:{port}: {e.strerror or e}"
        ) from None
    return runner, int(runner.addresses[0][1])
