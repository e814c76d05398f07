"""The worker daemon: one long-lived stream to the server, build actions in sandboxes.

The worker registers its resources and slot pools, heartbeats, and runs the build
actions the server leases to it, each in its own asyncio task (blocking work goes
to threads, so heartbeats keep flowing). Inputs come from a worker-local disk cache
in front of the server's CAS: only blobs the cache lacks are fetched, in batches.
Outputs are stored locally and uploaded in one pass before the result is reported.

When the stream breaks, running actions carry on; the worker reconnects with
exponential backoff and lists the leases it still holds (and results it could not
yet report), so the server keeps them with it. If the server stays away longer than
`reconnect_timeout` the worker gives up and exits with an error. Job leases are
left to a job runner that registers itself as `job_handler`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import socket
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from rbs import __version__
from rbs.cas.disk import DiskStore
from rbs.cas.store import CHUNK
from rbs.cas.twolevel import TwoLevelStore
from rbs.executor.action_runner import ActionExecutor, ActionOutcome
from rbs.executor.cgroups import detect
from rbs.executor.containers import ContainerSettings, runtimes_for, with_containers
from rbs.executor.jobhost import JobHost, cgroup_scope
from rbs.executor.lease import WorkerLease
from rbs.executor.machine import default_address, machine_resources
from rbs.executor.runuser import RunUsers, announce
from rbs.executor.supervisor_client import SupervisorError
from rbs.model import Digest, DigestFunction
from rbs.wire.actions import directory_children
from rbs.wire.reapi_client import (
    RemoteError,
    RemoteStore,
    aio_connect,
    channel_options,
    connect,
    parse_target,
)
from rbs.wire.workers import WORKERS_PROTOCOL
from rbs.wire.workers_actions import (
    ActionFinishedReport,
    ActionLeaseInfo,
    ActionStartedReport,
    CancelOrder,
)
from rbs.wire.workers_jobs import (
    InputOrder,
    JobFinishedReport,
    JobLeaseInfo,
    JobOrder,
    KillOrder,
    LogAck,
    ResultAck,
)
from rbs.wire.workers_session import (
    HeartbeatReport,
    LeaseRenewal,
    RegisteredInfo,
    Registration,
    WorkerReport,
)
from rbs.wire.workers_stream import WorkerStream

log = logging.getLogger(__name__)

_REGISTER_TIMEOUT_S = 30.0  # how long a server may take to answer Register


class WorkerError(RuntimeError):
    """The worker cannot go on (server gone too long, refused token); the message says why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """How one worker runs; None fields take the machine's values."""

    server: str
    work_dir: Path
    token: str | None = None
    name: str = ""
    address: str = ""
    cpus: int | None = None
    memory_bytes: int | None = None
    gpu_ids: tuple[str, ...] | None = None
    build_slots: int | None = None
    job_slots: int | None = None
    reconnect_timeout_s: float = 300.0
    link_inputs: bool = True
    cache_max_bytes: int | None = None
    # On stop, leave the job runs to the run supervisor for the next daemon to re-attach.
    leave_jobs_running: bool = False
    run_users: RunUsers | None = None  # --run-uids: each run as a uid of its own
    containers: ContainerSettings = field(default_factory=ContainerSettings)  # --containers

    def __post_init__(self) -> None:
        parse_target(self.server)
        for what, value in (
            ("--cpus", self.cpus),
            ("--build-slots", self.build_slots),
            ("--job-slots", self.job_slots),
            ("--memory-gb", self.memory_bytes),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{what} must not be negative, got {value}")
        if self.reconnect_timeout_s <= 0:
            raise ValueError("the reconnect timeout must be positive")


def worker_id_for(work_dir: Path) -> str:
    """A stable id kept in the work dir, so a restarted worker is known again."""
    path = work_dir / "worker-id"
    try:
        wid = path.read_text().strip()
        if wid:
            return wid
    except FileNotFoundError:
        pass
    wid = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    work_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(wid + "\n")
    return wid


JobHandler = Callable[[JobOrder], Awaitable[None]]


class Worker:
    """The daemon; `run()` until `stop()` or a fatal error."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        machine = machine_resources()
        hostname = socket.gethostname()
        cpus = config.cpus if config.cpus is not None else machine.cpus
        self.register = Registration(
            worker_id=worker_id_for(config.work_dir),
            name=config.name or hostname,
            hostname=hostname,
            address=config.address or default_address(hostname),
            cpus=cpus,
            memory_bytes=(
                config.memory_bytes if config.memory_bytes is not None else machine.memory_bytes
            ),
            gpu_ids=tuple(config.gpu_ids if config.gpu_ids is not None else machine.gpu_ids),
            build_slots=config.build_slots if config.build_slots is not None else cpus,
            job_slots=config.job_slots if config.job_slots is not None else cpus,
            container_runtimes=runtimes_for(config.containers),
            version=__version__,
            protocol_version=WORKERS_PROTOCOL,
        )
        self.worker_id = self.register.worker_id
        self._channel = connect(config.server)
        self.remote = RemoteStore(self._channel, token=config.token)
        # A cache, not a record: no fsync per blob (reads verify, so a blob torn by a
        # crash is dropped and fetched again), bounded by --max-cache-size.
        self.local = DiskStore(
            config.work_dir / "cas", durable=False, max_size=config.cache_max_bytes
        )
        self.store = TwoLevelStore(self.local, self.remote)
        self.runner = ActionExecutor(
            self.store,
            config.work_dir,
            output_store=self.local,
            upload=self._upload,
            prefetch=self._prefetch,
            fetch=self._fetch,
            worker_name=self.register.name,
            link_inputs=config.link_inputs,
            users=config.run_users,
        )
        announce(config.run_users, config.work_dir)  # says what holds; closes the work dir
        self.job_handler: JobHandler | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        # Results of leases that ended while no stream was open; sent after reconnecting.
        self._unsent: dict[str, ActionFinishedReport] = {}
        self._outbox: asyncio.Queue[WorkerReport] | None = None
        self._stopping = asyncio.Event()
        self.connected = asyncio.Event()
        self._heard_at = 0.0  # loop time of the server's last word
        self.jobs: JobHost | None = None
        self.lease = WorkerLease()
        if self.register.job_slots > 0:
            self.jobs = JobHost(
                work_dir=config.work_dir,
                store=self.store,
                send=self.send,
                connected=self.connected.is_set,
                slots=self.register.job_slots,
                hostname=hostname,
                backend=detect(scope=cgroup_scope(self.worker_id)),
                scope=cgroup_scope(self.worker_id),
                prefetch=self._prefetch,
                users=config.run_users,
            )
            self.lease.on_renew = self.jobs.renew
            self.jobs.setup = with_containers(self.jobs.setup, config, self)  # reports images
            self.job_handler = self.jobs.handle

    async def run(self) -> None:
        target = parse_target(self.config.server)
        await asyncio.to_thread(self.runner.clean_leftovers)
        if self.jobs is not None:
            try:
                await self.jobs.start()  # re-attaches to the runs a supervisor still holds
            except (SupervisorError, OSError) as e:
                raise WorkerError(f"cannot run jobs: {e}") from None
        backoff = 0.2
        loop = asyncio.get_running_loop()
        # --reconnect-timeout counts from the server's last word, however a stream ended.
        self._heard_at = loop.time()
        try:
            while not self._stopping.is_set():
                async with aio_connect(self.config.server, channel_options()) as ch:
                    try:
                        registered = await self._until_stopped(
                            self._session(WorkerStream(ch, self.config.token))
                        )
                    except grpc.aio.AioRpcError as e:
                        if e.code() in (
                            grpc.StatusCode.UNAUTHENTICATED,
                            grpc.StatusCode.PERMISSION_DENIED,
                            grpc.StatusCode.INVALID_ARGUMENT,
                            grpc.StatusCode.FAILED_PRECONDITION,  # another Workers protocol
                            grpc.StatusCode.UNIMPLEMENTED,
                        ):
                            raise WorkerError(
                                f"the server at {self.config.server} refused this worker: "
                                f"{e.code().name}: {e.details()}"
                            ) from None
                        log.warning("stream to %s ended: %s", target, e.code().name)
                        registered = False
                    except (OSError, grpc.RpcError, asyncio.InvalidStateError) as e:
                        log.warning("stream to %s failed: %s", target, e)
                        registered = False
                if registered:
                    backoff = 0.2
                if self._stopping.is_set():
                    break
                if loop.time() - self._heard_at >= self.config.reconnect_timeout_s:
                    raise WorkerError(
                        f"the server at {self.config.server} has been unreachable for "
                        f"{self.config.reconnect_timeout_s:g}s; giving up"
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), backoff)
                backoff = min(backoff * 2, 5.0)
        finally:
            await self._cancel_all()
            if self.jobs is not None:
                await self.jobs.stop(leave_running=self.config.leave_jobs_running)
            self._channel.close()

    def stop(self) -> None:
        self._stopping.set()

    async def _until_stopped(self, session: Coroutine[Any, Any, bool]) -> bool:
        """The session's result, or False once stopped: an unanswered Register must not
        hold up a SIGTERM (a port another process took)."""
        task = asyncio.ensure_future(session)
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if task.done():
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return False

    async def _cancel_all(self) -> None:
        tasks = list(self._running.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _session(self, stream: WorkerStream) -> bool:
        """One Connect stream; returns whether it got as far as being registered."""
        register = dataclasses.replace(
            self.register,
            held_action_leases=tuple(sorted({*self._running, *self._unsent})),
            held_job_leases=tuple(self.jobs.held_leases()) if self.jobs is not None else (),
        )
        outbox: asyncio.Queue[WorkerReport] = asyncio.Queue()
        await stream.write(register)
        try:
            first = await asyncio.wait_for(stream.read(), _REGISTER_TIMEOUT_S)
        except TimeoutError:
            stream.cancel()
            raise WorkerError(
                f"the server at {self.config.server} did not answer Register within "
                f"{_REGISTER_TIMEOUT_S:g}s: is it an rbs server with remote execution?"
            ) from None
        if not isinstance(first, RegisteredInfo):  # the stream ended, or something else came
            await stream.done_writing()
            return False
        self._heard_at = asyncio.get_running_loop().time()
        interval = first.heartbeat_interval_s or 5.0
        self.lease.configure(first.lease_ttl_s, first.kill_grace_s)
        log.info("registered with %s as %s", self.config.server, self.worker_id)
        for msg in self._unsent.values():
            outbox.put_nowait(msg)
        self._unsent.clear()
        self._outbox = outbox
        self.connected.set()
        if self.jobs is not None:
            self.jobs.on_connected()  # unacknowledged log lines, then held JobFinished
        writer = asyncio.create_task(stream.pump(outbox, self._keep_unsent))
        beat = asyncio.create_task(self._heartbeat(outbox, interval))
        stop = asyncio.create_task(self._stopping.wait())
        try:
            reader = asyncio.create_task(self._read(stream))
            done, _ = await asyncio.wait(
                {reader, writer, stop}, return_when=asyncio.FIRST_COMPLETED
            )
            for t in done:
                if t is not stop and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            self._outbox = None
            self.connected.clear()
            for t in (writer, beat, stop, reader):
                t.cancel()
            await asyncio.gather(writer, beat, stop, reader, return_exceptions=True)
            # Whatever the writer had not sent yet goes out after the next Register.
            while not outbox.empty():
                self._keep_unsent(outbox.get_nowait())
            stream.cancel()
        return True

    def _keep_unsent(self, report: WorkerReport) -> None:
        """A report no stream took: results are kept for the next one, the rest dropped."""
        if isinstance(report, ActionFinishedReport):
            self._unsent[report.lease_id] = report
        elif isinstance(report, JobFinishedReport) and self.jobs is not None:
            self.jobs.unsent(report)

    async def _heartbeat(self, outbox: asyncio.Queue[WorkerReport], interval: float) -> None:
        while True:
            outbox.put_nowait(
                HeartbeatReport(
                    build_slots_used=len(self._running),
                    job_slots_used=self.jobs.slots_used() if self.jobs is not None else 0,
                    load1=os.getloadavg()[0],
                )
            )
            await asyncio.sleep(interval)

    async def _read(self, stream: WorkerStream) -> None:
        loop = asyncio.get_running_loop()
        while True:
            order = await stream.read()
            if order is None:
                return  # the server closed the stream
            self._heard_at = loop.time()
            self.lease.renew()  # any word from the server renews the job lease
            if isinstance(order, LeaseRenewal):
                pass
            elif isinstance(order, ActionLeaseInfo):
                self._start(order)
            elif isinstance(order, CancelOrder):
                task = self._running.get(order.lease_id)
                if task is not None:
                    log.info("cancelling %s: %s", order.lease_id, order.reason)
                    task.cancel()
            elif isinstance(order, JobLeaseInfo | KillOrder | LogAck | ResultAck | InputOrder):
                if self.job_handler is not None:
                    await self.job_handler(order)
                else:
                    log.warning(
                        "the server sent %s but this worker runs no jobs", type(order).__name__
                    )

    def send(self, report: WorkerReport) -> None:
        """Queue a report for the server (dropped with a warning when disconnected,
        except results, which are kept until the next stream)."""
        if self._outbox is not None:
            self._outbox.put_nowait(report)
        elif isinstance(report, ActionFinishedReport):
            self._unsent[report.lease_id] = report
        else:
            log.debug("not connected; dropped a %s", type(report).__name__)

    def _start(self, lease: ActionLeaseInfo) -> None:
        if lease.lease_id in self._running:
            return  # a duplicate after a reconnect
        task = asyncio.create_task(self._run_action(lease), name=lease.lease_id)
        self._running[lease.lease_id] = task
        task.add_done_callback(lambda _t: self._running.pop(lease.lease_id, None))

    async def _run_action(self, lease: ActionLeaseInfo) -> None:
        self.send(ActionStartedReport(lease_id=lease.lease_id))
        digest = lease.action_digest
        if digest is None:
            outcome = ActionOutcome(code=grpc.StatusCode.INVALID_ARGUMENT, message=lease.problem)
        else:
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", lease.lease_id)
            log.info("running %s (%s, attempt %d)", lease.operation_name, digest, lease.attempt)
            try:
                outcome = await self._run_with_retries(digest, name, lease.timeout_s)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("action %s failed on this worker", digest)
                outcome = ActionOutcome(
                    code=grpc.StatusCode.INTERNAL,
                    message=f"worker {self.worker_id}: {type(e).__name__}: {e}",
                )
        self.send(
            ActionFinishedReport(
                lease_id=lease.lease_id,
                code=outcome.code,
                message=outcome.message,
                result=outcome.result,
            )
        )

    async def _run_with_retries(self, digest: Digest, name: str, timeout: float) -> ActionOutcome:
        """Run the action; if the server is briefly unreachable while inputs are fetched
        or outputs uploaded (a restart), wait and run it again rather than fail it."""
        delay = 0.5
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.reconnect_timeout_s
        while True:
            try:
                return await self.runner.run(digest, name=name, timeout_s=timeout)
            except RemoteError as e:
                # UNAVAILABLE: the server is down; CANCELLED: it stopped mid-call.
                transient = e.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
                if not transient or loop.time() + delay > deadline:
                    raise
                log.warning("server unreachable while running %s (%s); retrying", digest, e)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    def _fetch(self, digests: list[Digest]) -> None:
        """Copy the blobs the local cache lacks from the server, small ones in batches."""
        missing = self.local.find_missing(digests)
        small = [d for d in missing if d.size <= self.remote.batch_limit]
        if small:
            for d, data in self.remote.get_blobs(small).items():
                self.local.put(data, expected=d)
        for d in missing:
            if d.size > self.remote.batch_limit:
                self.store.fetch(d)

    def _prefetch(self, root: Digest) -> None:
        """Bring a whole input tree into the local cache: one batch per tree level, then
        one for all files (instead of a round trip per blob)."""
        files: set[Digest] = set()
        level = [root]
        while level:
            self._fetch(level)
            below: list[Digest] = []
            for d in level:
                children, subdirectories = directory_children(self.local.get(d), d.function)
                files.update(children)
                below.extend(subdirectories)
            level = below
        self._fetch(sorted(files, key=lambda d: d.hash))

    def _upload(self, digests: list[Digest]) -> None:
        """Make the server's CAS hold every output blob (small ones in batch calls)."""
        missing = self.remote.to_upload(digests)
        by_fn: dict[DigestFunction, list[bytes]] = {}
        for d in missing:
            if d.size <= self.remote.batch_limit:
                by_fn.setdefault(d.function, []).append(self.local.get(d))
            else:
                with self.local.open(d) as src, self.remote.writer(d) as w:
                    while chunk := src.read(CHUNK):
                        w.write(chunk)
                    w.commit()
        for fn, blobs in by_fn.items():
            self.remote.put_blobs(blobs, fn)
