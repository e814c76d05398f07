"""The Workers service: each worker's long-lived stream, and the hub that drives dispatch.

`WorkerHub` owns the `Dispatcher` (pure) and the open worker sessions. It feeds the
dispatcher events (`rbs.scheduler.dispatch_events`: register, heartbeat, lease
started/finished, stream ended, timer ticks) through `Dispatcher.handle` and carries out
the instructions, one handler per instruction type: an `ActionLease` goes down the
worker's stream, a lost worker's leases come back as new leases on other workers, and
an operation that ran out of attempts is failed through the `ActionEvents` listener
(the Execution engine). Job messages are passed to an optional `JobEvents` listener
(the job driver); it sends job leases with `send`; `worker_acks` folds a result's own
lines' Ack into its ResultAck. The server's builder sets both listeners (`set_listeners`).

`WorkersServicer` is the thin gRPC edge: it converts messages with rbs.wire
(`report_from_pb`, `order_to_pb`, batched: `workers_batch`); the hub sees typed values only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import grpc
from google.rpc import status_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.model import JobState
from rbs.scheduler.dispatch import DispatchConfig, Dispatcher, WorkerView
from rbs.scheduler.dispatch_events import (
    ActionSubmitted,
    DispatchEvent,
    DispatchTick,
    Lease,
    LeaseFinished,
    LeaseStarted,
    OperationCompleted,
    QueuedAction,
    WorkerConnected,
    WorkerDisconnected,
    WorkerDraining,
    WorkerHeartbeat,
    WorkerInfo,
    WorkerRestored,
)
from rbs.scheduler.dispatch_instructions import (
    CancelLease,
    DeliverResult,
    DispatchInstruction,
    DropWorker,
    FailOperation,
    MarkExecuting,
    StartLease,
)
from rbs.scheduler.events import RunRef
from rbs.server.operations import OperationStore
from rbs.server.worker_acks import FinalAcks
from rbs.server.worker_images import WorkerImages
from rbs.server.worker_records import info_from_json, worker_info
from rbs.wire.errors import InvalidRequest, rpc_errors
from rbs.wire.workers import ProtocolMismatch, check_protocol
from rbs.wire.workers_actions import (
    ActionLeaseInfo,
    ActionStartedReport,
    CancelOrder,
    ReceivedActionResult,
)
from rbs.wire.workers_batch import orders_out, unbatched
from rbs.wire.workers_images import ImagesReport
from rbs.wire.workers_jobs import JobReport
from rbs.wire.workers_session import (
    HeartbeatReport,
    LeaseRenewal,
    ReceivedReport,
    RegisteredInfo,
    Registration,
    ServerOrder,
    registration_from_pb,
    report_from_pb,
)
from rbs.wire.workers_status import ClusterStatusInfo, WorkerStatusInfo, epoch_ns, status_to_pb

log = logging.getLogger(__name__)


class ActionEvents(Protocol):
    """What the hub tells the Execution engine about leases."""

    def action_leased(self, lease: Lease) -> None: ...
    def action_started(self, lease: Lease) -> None: ...
    async def action_finished(
        self, operation: str, status: status_pb2.Status, result: re_pb2.ActionResult
    ) -> None: ...
    def action_failed(self, operation: str, message: str) -> None: ...


class JobEvents(Protocol):
    """What the hub tells the job scheduler: workers coming and going, job messages."""

    def worker_connected(self, info: WorkerInfo, held_job_leases: tuple[str, ...]) -> None: ...
    def worker_lost(self, worker_id: str) -> None: ...
    async def job_message(self, worker_id: str, report: JobReport) -> None: ...
    def job_counts(self) -> Mapping[str, int]: ...
    def job_slots_used(self, worker_id: str) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class HubConfig:
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 30.0
    reconnect_grace: float = 10.0
    max_attempts: int = 3
    validate: bool = False  # check the dispatcher's invariants after every step (tests)
    # The job lease sent in Registered (docs/design/runs.md); 0: none.
    lease_ttl: float = 0.0
    kill_grace: float = 0.0

    def __post_init__(self) -> None:
        if self.heartbeat_interval <= 0 or self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError(
                "heartbeat_interval must be positive and heartbeat_timeout longer than it "
                f"(got {self.heartbeat_interval:g}s and {self.heartbeat_timeout:g}s)"
            )


class _Session:
    """One open Connect stream: orders to send, ended by None."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.outbox: asyncio.Queue[ServerOrder | None] = asyncio.Queue()


class WorkerHub:
    """Worker sessions plus the dispatcher; see the module docstring."""

    def __init__(
        self,
        store: OperationStore,
        config: HubConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or HubConfig()
        self.dispatcher = Dispatcher(
            DispatchConfig(
                heartbeat_timeout=self.config.heartbeat_timeout,
                reconnect_grace=self.config.reconnect_grace,
                max_attempts=self.config.max_attempts,
                # Lease ids must never repeat across restarts: a worker may still hold an old one.
                lease_prefix=f"{uuid.uuid4().hex[:8]}-",
                validate=self.config.validate,
            )
        )
        self._store = store
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self.images = WorkerImages()  # each open stream's latest Images report
        self.acks = FinalAcks(self.send)  # a run's last lines, acked with its result
        self.actions: ActionEvents | None = None
        self.jobs: JobEvents | None = None
        self.draining: Callable[[str], bool] = lambda _worker_id: False  # .reservations
        self._reaper: asyncio.Task[None] | None = None
        self._carriers: Mapping[type, Callable[[Any], None]] = {
            StartLease: self._start_lease,
            CancelLease: self._cancel_lease,
            FailOperation: self._fail_operation,
            MarkExecuting: self._mark_executing,
            DeliverResult: self._deliver_result,
            DropWorker: self._drop_worker,
        }

    def set_listeners(
        self, *, actions: ActionEvents | None = None, jobs: JobEvents | None = None
    ) -> None:
        """Who hears about leases (the Execution engine) and job traffic (the job driver)."""
        self.actions = actions
        self.jobs = jobs

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        for s in list(self._sessions.values()):
            s.outbox.put_nowait(None)

    async def _reap(self) -> None:
        period = min(1.0, self.config.heartbeat_interval, self.config.reconnect_grace or 1.0)
        while True:
            await asyncio.sleep(period)
            try:
                self._step(DispatchTick())
            except Exception:
                log.exception("worker reaper step failed; continuing")

    def restore(self, workers: list[tuple[str, str, float]], leases: list[Lease]) -> None:
        """After a restart: known workers (as disconnected) and the leases they held."""
        by_worker: dict[str, list[Lease]] = {}
        for lease in leases:
            by_worker.setdefault(lease.worker_id, []).append(lease)
        for worker_id, info_json, _ in workers:
            try:
                info = info_from_json(info_json)
            except (ValueError, TypeError) as e:
                log.warning("ignoring unreadable record of worker %s: %s", worker_id, e)
                continue
            self._step(WorkerRestored(info=info, leases=tuple(by_worker.pop(worker_id, []))))
        for orphans in by_worker.values():
            for lease in orphans:
                self.submit(lease.action)

    # ------------------------------------------------------------------ actions

    def submit(self, action: QueuedAction) -> None:
        self._step(ActionSubmitted(action=action))

    def complete(self, operation: str) -> None:
        self._step(OperationCompleted(operation=operation))

    def send(self, worker_id: str, order: ServerOrder) -> bool:
        """Queue an order for a connected worker; False when it is not connected."""
        session, folded = self._sessions.get(worker_id), self.acks.outgoing(worker_id, order)
        if session is None or folded is None:
            return session is not None
        session.outbox.put_nowait(folded)
        return True

    def drop(self, worker_id: str) -> None:
        """End a worker's stream if it is open (the job scheduler gave it up): awake, it
        registers afresh, and the runs given away meanwhile are stopped on it."""
        session = self._sessions.get(worker_id)
        if session is not None:
            session.outbox.put_nowait(None)

    def workers(self) -> list[WorkerView]:
        """Every worker the dispatcher knows, by id, with its connection state."""
        return self.dispatcher.workers()

    def _step(self, event: DispatchEvent) -> list[DispatchInstruction]:
        """Feed one event to the dispatcher and carry its instructions out, in order."""
        instructions = self.dispatcher.handle(event, self._clock())
        for ins in instructions:
            self._carriers[type(ins)](ins)
        return instructions

    def set_draining(self, worker_id: str, draining: bool) -> None:
        """Lease the worker no new build actions while `draining` (rbs.server.reservations)."""
        self._step(WorkerDraining(worker_id=worker_id, draining=draining))

    def _start_lease(self, ins: StartLease) -> None:
        if self.actions is not None:
            self.actions.action_leased(ins.lease)
        a = ins.action
        lease = ActionLeaseInfo(
            lease_id=ins.lease_id,
            operation_name=a.operation,
            action_digest=a.action_digest,
            timeout_s=a.timeout_s,
            attempt=a.attempt,
        )
        if not self.send(ins.worker_id, lease):
            log.warning("worker %s has no open stream for %s", ins.worker_id, ins.lease_id)
        log.info(
            "lease %s: %s attempt %d -> worker %s",
            ins.lease_id,
            a.operation,
            a.attempt,
            ins.worker_id,
        )

    def _cancel_lease(self, ins: CancelLease) -> None:
        log.info("cancel lease %s on %s: %s", ins.lease_id, ins.worker_id, ins.reason)
        self.send(ins.worker_id, CancelOrder(lease_id=ins.lease_id, reason=ins.reason))

    def _fail_operation(self, ins: FailOperation) -> None:
        log.warning("%s failed: %s", ins.operation, ins.message)
        if self.actions is not None:
            self.actions.action_failed(ins.operation, ins.message)

    def _mark_executing(self, ins: MarkExecuting) -> None:
        if self.actions is not None:
            self.actions.action_started(ins.lease)

    def _deliver_result(self, ins: DeliverResult) -> None:
        # The result itself is a wire message the dispatcher never sees: `handle` below,
        # which holds it, hands it to the engine once the other instructions are out.
        pass

    def _drop_worker(self, ins: DropWorker) -> None:
        log.warning("worker %s is lost: %s", ins.worker_id, ins.reason)
        session = self._sessions.get(ins.worker_id)
        if session is not None:
            # Silent but still connected (frozen, overloaded): end its stream so
            # that, if it wakes up, it registers afresh and drops what it holds.
            session.outbox.put_nowait(None)
        if self.jobs is not None:
            self.jobs.worker_lost(ins.worker_id)

    # ------------------------------------------------------------------ sessions

    def attach(self, register: Registration) -> _Session:
        info = worker_info(register)
        old = self._sessions.get(info.worker_id)
        if old is not None:
            # The worker opened a new stream before we noticed the old one end.
            old.outbox.put_nowait(None)
        session = _Session(info.worker_id)
        self._sessions[info.worker_id] = session
        try:
            self._store.save_worker(info.worker_id, json.dumps(asdict(info)), time.time())
        except sqlite3.Error as e:
            # Only a later restart's memory of it: a full disk must not turn a worker away
            # (it may hold results the job journal is waiting for).
            log.warning("worker %s: its record is not saved: %s", info.worker_id, e)
        session.outbox.put_nowait(
            RegisteredInfo(
                worker_id=info.worker_id,
                heartbeat_interval_s=self.config.heartbeat_interval,
                lease_ttl_s=self.config.lease_ttl,
                kill_grace_s=self.config.kill_grace,
            )
        )
        log.info(
            "worker %s (%s) connected: %d build slot(s), %d job slot(s)",
            info.worker_id,
            info.hostname,
            info.build_slots,
            info.job_slots,
        )
        self._step(WorkerConnected(info=info, held_leases=register.held_action_leases))
        if self.jobs is not None:
            self.jobs.worker_connected(info, register.held_job_leases)
        return session

    def detach(self, session: _Session) -> None:
        if self._sessions.get(session.worker_id) is not session:
            return  # replaced by a newer stream of the same worker
        del self._sessions[session.worker_id]
        self.images.forget(session.worker_id)
        log.info("worker %s disconnected", session.worker_id)
        self._step(WorkerDisconnected(worker_id=session.worker_id))

    async def handle(self, worker_id: str, report: ReceivedReport | None) -> None:
        """One report of a worker; None is a message of a kind this server does not know."""
        if isinstance(report, HeartbeatReport):
            self._step(WorkerHeartbeat(worker_id=worker_id))
            if self.config.lease_ttl > 0:
                self.send(worker_id, LeaseRenewal())
        elif isinstance(report, ActionStartedReport):
            self._step(LeaseStarted(lease_id=report.lease_id))
        elif isinstance(report, ReceivedActionResult):
            done = self._step(LeaseFinished(lease_id=report.lease_id))
            ops = [i.operation for i in done if isinstance(i, DeliverResult)]
            if not ops:
                log.info("ignoring result of unknown lease %s from %s", report.lease_id, worker_id)
            elif self.actions is not None:
                await self.actions.action_finished(ops[0], report.status, report.result)
        elif isinstance(report, JobReport):  # a job's start, end, log lines or pty output
            if self.jobs is not None:
                await self.acks.deliver(worker_id, report, self.jobs.job_message)
            else:
                log.warning(
                    "worker %s sent %s but no job scheduler is running",
                    worker_id,
                    type(report).__name__,
                )
        elif isinstance(report, ImagesReport):
            self.images.update(worker_id, report)
        elif isinstance(report, Registration):
            raise InvalidRequest("Register may only be the first message of a Connect stream")
        # Heartbeats also prove liveness: any message counts.
        self._step(WorkerHeartbeat(worker_id=worker_id))

    # ------------------------------------------------------------------ status

    def cluster_status(self) -> ClusterStatusInfo:
        """The cluster at a glance: workers, slots, queue depth, running actions, jobs."""
        now_mono, now_wall = self._clock(), time.time()
        counts = dict.fromkeys((s.value for s in JobState), 0)
        if self.jobs is not None:
            counts.update(self.jobs.job_counts())
        workers = []
        for v in self.dispatcher.workers():
            i, images = v.info, self.images.get(v.info.worker_id)
            workers.append(
                WorkerStatusInfo(
                    worker_id=i.worker_id,
                    name=i.name,
                    hostname=i.hostname,
                    address=i.address,
                    cpus=i.cpus,
                    memory_bytes=i.memory_bytes,
                    gpu_ids=i.gpu_ids,
                    build_slots=i.build_slots,
                    build_slots_used=v.build_slots_used,
                    job_slots=i.job_slots,
                    job_slots_used=self.jobs.job_slots_used(i.worker_id) if self.jobs else 0,
                    state=v.state.value + (" draining" if self.draining(i.worker_id) else ""),
                    last_heartbeat_ns=epoch_ns(now_wall - (now_mono - v.last_heartbeat)),
                    version=i.version,
                    container_runtimes=i.container_runtimes,
                    images=images.images,
                    can_pull_images=images.can_pull,
                )
            )
        return ClusterStatusInfo(
            workers=tuple(workers),
            queued_actions=self.dispatcher.queued,
            running_actions=self.dispatcher.running,
            jobs_by_state=tuple(counts.items()),
            now_ns=epoch_ns(now_wall),
        )

    def status(self) -> w_pb2.ClusterStatus:
        """`cluster_status` as the Status call answers it (the jobs API serves it too)."""
        return status_to_pb(self.cluster_status())


def _rank_of(lease_id: str) -> int:
    return RunRef.parse_lease(lease_id).rank


class WorkersServicer(w_grpc.WorkersServicer):  # type: ignore[misc]
    """gRPC edge of the hub: one Connect stream per worker, and Status."""

    def __init__(self, hub: WorkerHub) -> None:
        self._hub = hub

    @rpc_errors
    async def Connect(
        self,
        request_iterator: AsyncIterator[w_pb2.WorkerMessage],
        context: grpc.aio.ServicerContext[w_pb2.WorkerMessage, w_pb2.ServerMessage],
    ) -> AsyncIterator[w_pb2.ServerMessage]:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "register":
            raise InvalidRequest(
                "the first message of a Connect stream must be Register (worker id and "
                "resources); upgrade the worker to the server's rbs version"
            )
        try:
            check_protocol(first.register)
        except ProtocolMismatch as e:
            log.warning("refused a worker: %s", e)  # the operator has to act
            raise
        session = self._hub.attach(registration_from_pb(first.register))
        reader = asyncio.get_running_loop().create_task(
            self._read(request_iterator, session), name=f"worker-{session.worker_id}"
        )
        try:
            async for msg in orders_out(session.outbox):  # what waits goes in one batch
                yield msg
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            self._hub.detach(session)

    async def _read(
        self, request_iterator: AsyncIterator[w_pb2.WorkerMessage], session: _Session
    ) -> None:
        try:
            async for msg in unbatched(request_iterator):
                try:
                    await self._hub.handle(session.worker_id, report_from_pb(msg, rank_of=_rank_of))
                except InvalidRequest as e:
                    log.warning("worker %s sent a bad message: %s", session.worker_id, e)
                except Exception:
                    # One message failing must not end the session or the server.
                    log.exception("handling a message of worker %s failed", session.worker_id)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # A broken stream ends this session; the worker reconnects.
            log.warning("stream of worker %s ended: %s", session.worker_id, e)
        session.outbox.put_nowait(None)

    @rpc_errors
    async def Status(
        self,
        request: w_pb2.StatusRequest,
        context: grpc.aio.ServicerContext[w_pb2.StatusRequest, w_pb2.ClusterStatus],
    ) -> w_pb2.ClusterStatus:
        return self._hub.status()
