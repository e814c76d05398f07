"""The server's Prometheus metrics (prometheus_client), served at GET /metrics on the jobs API port.

Three kinds, all in one registry per server (never the process-global one, so two servers
in one process, as in the tests, keep their own):

- gauges read when scraped, from the parts themselves (`_StateCollector`): jobs by
  state and by queue, workers, job and build slots, GPUs, queued and running actions,
  the CAS's size (its `stat` walks the store, so it is cached for `CAS_STAT_TTL_S`);
- counters and histograms fed by the job driver after each scheduler step
  (`ServerMetrics.observe_step`, from the step's Save*, Start and Kill instructions):
  the step's duration, submit-to-start and run times, requeues, preemptions, OOM kills;
- per RPC method, calls by status code and their latency (`RpcMetricsInterceptor`, the
  last gRPC interceptor), and the jobs API's bytes in and out (`http_middleware`).

No label carries a job id, a lease or a user: a label is a state, a queue, a gRPC
method, a status code or a direction, all bounded sets (docs/design/metrics.md).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from rbs.model import JobState, KillReason
from rbs.scheduler.events import RunRef
from rbs.scheduler.instructions import Instruction, Kill, SaveJob, SaveTask, Start
from rbs.server.cas_metrics import CountingDiskStore

if TYPE_CHECKING:
    from rbs.cas.store import BlobStore
    from rbs.server.job_driver import JobDriver
    from rbs.server.workers_service import WorkerHub

METRICS_PATH = "/metrics"
CAS_STAT_TTL_S = 60.0
# Seconds: a scheduler step takes well under a millisecond to a second at 100,000 jobs.
STEP_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Seconds a job waits, or runs: from a second to a day.
JOB_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400)
RPC_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_RUNS_KEPT = 1_000_000  # a bound on the runs followed for their run time


class ServerMetrics:
    """One server's registry, and the hooks that feed it."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.step_seconds = Histogram(
            "rbs_scheduler_step_seconds",
            "One scheduler step: the core's pass over a batch of events and its journal write.",
            buckets=STEP_BUCKETS,
            registry=r,
        )
        self.wait_seconds = Histogram(
            "rbs_job_wait_seconds",
            "From a job's submission to the start of its first run.",
            buckets=JOB_BUCKETS,
            registry=r,
        )
        self.run_seconds = Histogram(
            "rbs_job_run_seconds",
            "How long each run (an attempt of a job or array task) ran.",
            buckets=JOB_BUCKETS,
            registry=r,
        )
        self.requeues = Counter(
            "rbs_job_requeues", "Jobs that went from running back to pending.", registry=r
        )
        self.preemptions = Counter(
            "rbs_job_preemptions",
            "Runs stopped to make room for a job of more priority.",
            registry=r,
        )
        self.oom_kills = Counter(
            "rbs_job_oom_kills", "Runs that ended killed for running out of memory.", registry=r
        )
        self.rpc_seconds = Histogram(
            "rbs_rpc_seconds",
            "gRPC calls by method: their latency (a stream's: its whole life).",
            labelnames=("method",),
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.rpcs = Counter(
            "rbs_rpc", "gRPC calls by method and status code.", ("method", "code"), registry=r
        )
        self.http_bytes = Counter(
            "rbs_http_bytes",
            "Bytes of jobs API bodies, by direction (in, out).",
            ("direction",),
            registry=r,
        )
        self._job_states: dict[int, JobState] = {}  # jobs not yet ended, as last saved
        self._runs: dict[tuple[int, int | None, int], None] = {}  # runs seen running
        self._gpus: dict[str, int] = {}  # lease id -> the GPUs its Start pinned
        self._preempted: dict[tuple[int, int | None, int], None] = {}

    # ------------------------------------------------------------------ feeding

    def attach(self, driver: JobDriver | None, hub: WorkerHub, store: BlobStore) -> None:
        """Read the parts' state at every scrape; with a driver, feed on its steps."""
        self.registry.register(_StateCollector(self, driver, hub, store))
        if driver is not None:
            driver.observe = self.observe_step

    def gpus_in_use(self) -> int:
        return sum(self._gpus.values())

    def observe_step(self, instructions: Iterable[Instruction], seconds: float) -> None:
        """One scheduler step took `seconds` and produced `instructions`."""
        self.step_seconds.observe(seconds)
        for ins in instructions:
            if isinstance(ins, SaveJob):
                self._job_saved(ins)
            elif isinstance(ins, SaveTask):
                self._task_saved(ins)
            elif isinstance(ins, Start):
                self._gpus[ins.lease_id] = len(ins.gpus)
            elif isinstance(ins, Kill) and ins.reason is KillReason.PREEMPT:
                key = (ins.run.job_id, ins.run.index, ins.run.attempt)
                if key not in self._preempted:  # a gang's ranks are one preemption
                    self._preempted[key] = None
                    self.preemptions.inc()

    def _job_saved(self, ins: SaveJob) -> None:
        rec = ins.record
        before = self._job_states.get(rec.job_id)
        if rec.state.terminal:
            self._job_states.pop(rec.job_id, None)
        else:
            self._job_states[rec.job_id] = rec.state
        if rec.state is JobState.PENDING and before is JobState.RUNNING:
            self.requeues.inc()
        first_start = rec.state is JobState.RUNNING and before is not JobState.RUNNING
        if first_start and rec.attempts <= 1 and rec.start_time is not None:
            self.wait_seconds.observe(max(0.0, rec.start_time - rec.submit_time))

    def _task_saved(self, ins: SaveTask) -> None:
        rec = ins.record
        key = (rec.job_id, rec.index, rec.attempt)
        if rec.active:
            if key not in self._runs and len(self._runs) < _RUNS_KEPT:
                self._runs[key] = None
            return
        self._preempted.pop(key, None)
        for node in rec.nodes:
            run = RunRef(job_id=rec.job_id, index=rec.index, attempt=rec.attempt, rank=node.rank)
            self._gpus.pop(run.lease_id, None)
        if key in self._runs:  # counted once, when the run is first saved as ended
            del self._runs[key]
            if rec.end_time is not None:
                self.run_seconds.observe(max(0.0, rec.end_time - rec.start_time))
            if rec.oom:
                self.oom_kills.inc()

    # ------------------------------------------------------------------ serving

    def interceptor(self) -> RpcMetricsInterceptor:
        return RpcMetricsInterceptor(self)

    def add_routes(self, app: web.Application) -> None:
        """GET /metrics, and the byte counts of every other route (innermost middleware)."""
        app.router.add_get(METRICS_PATH, self.serve)
        app.middlewares.append(self.http_middleware)

    async def serve(self, request: web.Request) -> web.Response:
        # Collecting reads the CAS's size now and then (a walk of the store): off the loop.
        body = await asyncio.to_thread(generate_latest, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @web.middleware
    async def http_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        resp = await handler(request)
        if request.path != METRICS_PATH:
            self.http_bytes.labels("in").inc(request.content_length or 0)
            out = resp.body_length or resp.content_length or 0
            self.http_bytes.labels("out").inc(out)
        return resp


class _StateCollector(Collector):
    """Gauges read from the server's parts when scraped."""

    def __init__(
        self, metrics: ServerMetrics, driver: JobDriver | None, hub: WorkerHub, store: BlobStore
    ) -> None:
        self._metrics = metrics
        self._driver = driver
        self._hub = hub
        self._store = store
        self._cas: tuple[float, int, int] | None = None  # (when, blobs, bytes)

    def collect(self) -> Iterator[Metric]:
        status = self._hub.cluster_status()
        jobs = GaugeMetricFamily("rbs_jobs", "Jobs the server knows by state.", labels=["state"])
        for state, n in status.jobs_by_state:
            jobs.add_metric([state], n)
        yield jobs
        if self._driver is not None:
            queued = GaugeMetricFamily(
                "rbs_queue_jobs", "Jobs waiting or running, by queue.", labels=["queue", "state"]
            )
            tasks = GaugeMetricFamily(
                "rbs_queue_tasks",
                "Tasks (runs of a job or array task) waiting or running, by queue.",
                labels=["queue", "state"],
            )
            for q in self._driver.sched.queues():
                queued.add_metric([q.name, JobState.PENDING.value], q.pending_jobs)
                queued.add_metric([q.name, JobState.RUNNING.value], q.running_jobs)
                tasks.add_metric([q.name, JobState.PENDING.value], q.pending_tasks)
                tasks.add_metric([q.name, JobState.RUNNING.value], q.running_tasks)
            yield queued
            yield tasks
        yield from self._workers(status.workers)
        actions = GaugeMetricFamily(
            "rbs_build_actions", "Build actions queued and running.", labels=["state"]
        )
        actions.add_metric(["queued"], status.queued_actions)
        actions.add_metric(["running"], status.running_actions)
        yield actions
        yield from self._cas_size()

    def _workers(self, workers: Iterable[Any]) -> Iterator[Metric]:
        by_state: dict[str, int] = {}
        job_slots = {"used": 0, "free": 0}
        build_slots = {"used": 0, "free": 0}
        gpus = 0
        for w in workers:
            by_state[w.state] = by_state.get(w.state, 0) + 1
            if w.state != "CONNECTED":
                continue
            job_slots["used"] += w.job_slots_used
            job_slots["free"] += max(0, w.job_slots - w.job_slots_used)
            build_slots["used"] += w.build_slots_used
            build_slots["free"] += max(0, w.build_slots - w.build_slots_used)
            gpus += len(w.gpu_ids)
        g = GaugeMetricFamily(
            "rbs_workers", "Workers the server knows, by state.", labels=["state"]
        )
        for state, n in sorted(by_state.items()):
            g.add_metric([state], n)
        yield g
        for name, slots, what in (
            ("rbs_job_slots", job_slots, "Job slots of connected workers"),
            ("rbs_build_slots", build_slots, "Build-action slots of connected workers"),
        ):
            s = GaugeMetricFamily(name, f"{what}, used and free.", labels=["state"])
            for state, n in slots.items():
                s.add_metric([state], n)
            yield s
        used = self._metrics.gpus_in_use()
        g = GaugeMetricFamily(
            "rbs_gpus", "GPUs of connected workers, used and free.", labels=["state"]
        )
        g.add_metric(["used"], used)
        g.add_metric(["free"], max(0, gpus - used))
        yield g

    def _cas_size(self) -> Iterator[Metric]:
        stat = getattr(self._store, "stat", None)
        if stat is None:
            return
        now = time.monotonic()
        if self._cas is None or now - self._cas[0] > CAS_STAT_TTL_S:
            try:
                s = stat()
            except OSError:
                return  # a store being swept under us: the next scrape reads it
            self._cas = (now, s.blobs, s.total_bytes)
        _, blobs, size = self._cas
        yield GaugeMetricFamily("rbs_cas_bytes", "Bytes the CAS holds on disk.", value=size)
        yield GaugeMetricFamily("rbs_cas_blobs", "Blobs the CAS holds.", value=blobs)
        if isinstance(self._store, CountingDiskStore):
            s = self._store
            lookups = CounterMetricFamily(
                "rbs_cas_lookups",
                "Digests asked about (FindMissing): held or not.",
                labels=["result"],
            )
            lookups.add_metric(["hit"], s.lookup_hits)
            lookups.add_metric(["miss"], s.lookup_misses)
            yield lookups
            yield CounterMetricFamily(
                "rbs_cas_evicted_blobs",
                "Blobs the CAS evicted to stay in its bound.",
                value=s.evicted_blobs,
            )
            yield CounterMetricFamily(
                "rbs_cas_evicted_bytes",
                "Bytes the CAS evicted to stay in its bound.",
                value=s.evicted_bytes,
            )


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Counts each gRPC call by method and status code and times it. Unknown methods have
    no handler and are not counted, so `method` takes only the server's own names."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _timed(handler, handler_call_details.method, self._m)


def _code(context: Any, failed: bool) -> str:
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN" if failed else "OK"


def _timed(handler: Any, method: str, m: ServerMetrics) -> Any:
    for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        inner = getattr(handler, kind)
        if inner is not None:
            break
    else:
        return handler

    def done(context: Any, started: float, failed: bool) -> None:
        m.rpc_seconds.labels(method).observe(time.perf_counter() - started)
        m.rpcs.labels(method, _code(context, failed)).inc()

    if inspect.isasyncgenfunction(inner):

        async def streaming(request: Any, context: Any) -> AsyncIterator[Any]:
            started, failed = time.perf_counter(), True
            try:
                async for item in inner(request, context):
                    yield item
                failed = False
            finally:
                done(context, started, failed)

        return handler._replace(**{kind: streaming})
    if inspect.iscoroutinefunction(inner):

        async def call(request: Any, context: Any) -> Any:
            started, failed = time.perf_counter(), True
            try:
                result = await inner(request, context)
                failed = False
                return result
            finally:
                done(context, started, failed)

        return handler._replace(**{kind: call})
    return handler  # a plain function (none of rbs's servicers): left as it is
