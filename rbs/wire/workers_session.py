"""The Workers stream's envelopes: Register, Registered, Heartbeat, and any message <-> its value.

One table per direction turns any typed value into its WorkerMessage/ServerMessage and
back. A worker sends `WorkerReport`s and receives `ServerOrder`s; the server the other way
round. `report_to_pb`/`order_from_pb` are the worker's side, `report_from_pb`/`order_to_pb`
the server's. A message kind this rbs does not know (a newer peer's) reads as None on
the server and as an `UnknownOrder` on the worker, which both sides ignore.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.wire.workers import WORKERS_PROTOCOL
from rbs.wire.workers_actions import (
    ActionFinishedReport,
    ActionLeaseInfo,
    ActionStartedReport,
    CancelOrder,
    ReceivedActionResult,
    action_finished_from_pb,
    action_finished_to_pb,
    action_lease_from_pb,
    action_lease_to_pb,
    action_started_from_pb,
    action_started_to_pb,
    cancel_from_pb,
    cancel_to_pb,
    duration_to_pb,
)
from rbs.wire.workers_images import ImagesReport, images_from_pb, images_to_pb
from rbs.wire.workers_jobs import (
    InputOrder,
    JobFinishedReport,
    JobLeaseInfo,
    JobStartedReport,
    KillOrder,
    LogAck,
    LogBatch,
    OutputReport,
    ResultAck,
    ack_from_pb,
    ack_to_pb,
    input_from_pb,
    input_to_pb,
    job_finished_from_pb,
    job_finished_to_pb,
    job_lease_from_pb,
    job_lease_to_pb,
    job_started_from_pb,
    job_started_to_pb,
    kill_from_pb,
    kill_to_pb,
    log_batch_from_pb,
    log_batch_to_pb,
    output_from_pb,
    output_to_pb,
    result_ack_from_pb,
    result_ack_to_pb,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """What a worker says about itself first on every stream (Register)."""

    worker_id: str  # stable across reconnects and restarts
    name: str = ""
    hostname: str = ""
    address: str = ""  # where other ranks of a gang reach it
    cpus: int = 0
    memory_bytes: int = 0
    gpu_ids: tuple[str, ...] = ()
    build_slots: int = 0
    job_slots: int = 0
    container_runtimes: tuple[str, ...] = ()
    version: str = ""  # the worker's rbs version
    # After a reconnect: the leases it still runs, which the server leaves with it.
    held_action_leases: tuple[str, ...] = ()
    held_job_leases: tuple[str, ...] = ()
    protocol_version: int = WORKERS_PROTOCOL


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredInfo:
    """The server's answer to Register: the worker's id and how often to heartbeat."""

    worker_id: str
    heartbeat_interval_s: float  # 0: not said
    # The job lease (docs/design/runs.md); 0: none, runs carry on while the server is away.
    lease_ttl_s: float = 0.0
    kill_grace_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRenewal:
    """The server's answer to a heartbeat: the worker's job lease runs on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatReport:
    """Slots in use as the worker sees them (the server's own count wins), and its load."""

    build_slots_used: int = 0
    job_slots_used: int = 0
    load1: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownOrder:
    """A ServerMessage of a kind this worker does not know (or none), ignored."""

    kind: str | None


WorkerReport = (
    Registration
    | HeartbeatReport
    | ActionStartedReport
    | ActionFinishedReport
    | JobStartedReport
    | JobFinishedReport
    | LogBatch
    | OutputReport
    | ImagesReport
)
# What the server reads: the same, but an action's result stays REAPI messages.
ReceivedReport = (
    Registration
    | HeartbeatReport
    | ActionStartedReport
    | ReceivedActionResult
    | JobStartedReport
    | JobFinishedReport
    | LogBatch
    | OutputReport
    | ImagesReport
)
ServerOrder = (
    RegisteredInfo
    | ActionLeaseInfo
    | CancelOrder
    | JobLeaseInfo
    | KillOrder
    | LogAck
    | LeaseRenewal
    | ResultAck
    | InputOrder
)


# ---------------------------------------------------------------- the three session messages


def registration_to_pb(r: Registration) -> w_pb2.Register:
    return w_pb2.Register(
        worker_id=r.worker_id,
        name=r.name,
        hostname=r.hostname,
        address=r.address,
        cpus=r.cpus,
        memory_bytes=r.memory_bytes,
        gpu_ids=list(r.gpu_ids),
        build_slots=r.build_slots,
        job_slots=r.job_slots,
        container_runtimes=list(r.container_runtimes),
        version=r.version,
        held_action_leases=list(r.held_action_leases),
        held_job_leases=list(r.held_job_leases),
        protocol_version=r.protocol_version,
    )


def registration_from_pb(pb: w_pb2.Register) -> Registration:
    return Registration(
        worker_id=pb.worker_id,
        name=pb.name,
        hostname=pb.hostname,
        address=pb.address,
        cpus=pb.cpus,
        memory_bytes=pb.memory_bytes,
        gpu_ids=tuple(pb.gpu_ids),
        build_slots=pb.build_slots,
        job_slots=pb.job_slots,
        container_runtimes=tuple(pb.container_runtimes),
        version=pb.version,
        held_action_leases=tuple(pb.held_action_leases),
        held_job_leases=tuple(pb.held_job_leases),
        protocol_version=pb.protocol_version,
    )


def registered_to_pb(r: RegisteredInfo) -> w_pb2.Registered:
    pb = w_pb2.Registered(
        worker_id=r.worker_id, heartbeat_interval=duration_to_pb(r.heartbeat_interval_s)
    )
    if r.lease_ttl_s > 0:
        pb.lease_ttl.CopyFrom(duration_to_pb(r.lease_ttl_s))
        pb.kill_grace.CopyFrom(duration_to_pb(r.kill_grace_s))
    return pb


def registered_from_pb(pb: w_pb2.Registered) -> RegisteredInfo:
    return RegisteredInfo(
        worker_id=pb.worker_id,
        heartbeat_interval_s=pb.heartbeat_interval.ToTimedelta().total_seconds(),
        lease_ttl_s=pb.lease_ttl.ToTimedelta().total_seconds() if pb.HasField("lease_ttl") else 0,
        kill_grace_s=pb.kill_grace.ToTimedelta().total_seconds(),
    )


def renewal_to_pb(_: LeaseRenewal) -> w_pb2.LeaseRenewal:
    return w_pb2.LeaseRenewal()


def renewal_from_pb(_: w_pb2.LeaseRenewal) -> LeaseRenewal:
    return LeaseRenewal()


def heartbeat_to_pb(h: HeartbeatReport) -> w_pb2.Heartbeat:
    return w_pb2.Heartbeat(
        build_slots_used=h.build_slots_used, job_slots_used=h.job_slots_used, load1=h.load1
    )


def heartbeat_from_pb(pb: w_pb2.Heartbeat) -> HeartbeatReport:
    return HeartbeatReport(
        build_slots_used=pb.build_slots_used, job_slots_used=pb.job_slots_used, load1=pb.load1
    )


# ---------------------------------------------------------------- worker -> server

# Each report type: its WorkerMessage field and the conversion of its content.
_REPORTS: Mapping[type, tuple[str, Callable[[Any], Any]]] = {
    Registration: ("register", registration_to_pb),
    HeartbeatReport: ("heartbeat", heartbeat_to_pb),
    ActionStartedReport: ("action_started", action_started_to_pb),
    ActionFinishedReport: ("action_finished", action_finished_to_pb),
    JobStartedReport: ("job_started", job_started_to_pb),
    JobFinishedReport: ("job_finished", job_finished_to_pb),
    LogBatch: ("log_lines", log_batch_to_pb),
    OutputReport: ("job_output", output_to_pb),
    ImagesReport: ("images", images_to_pb),
}


def report_to_pb(report: WorkerReport) -> w_pb2.WorkerMessage:
    """The message a worker writes for a report."""
    kind, convert = _REPORTS[type(report)]
    return w_pb2.WorkerMessage(**{kind: convert(report)})


# Each WorkerMessage field the server reads, and how (log lines and results below: they need a rank).
_READ_REPORTS: Mapping[str, Callable[[Any], ReceivedReport]] = {
    "register": registration_from_pb,
    "heartbeat": heartbeat_from_pb,
    "action_started": action_started_from_pb,
    "action_finished": action_finished_from_pb,
    "job_started": job_started_from_pb,
    "images": images_from_pb,
    "job_output": output_from_pb,
}


def report_from_pb(
    msg: w_pb2.WorkerMessage, *, rank_of: Callable[[str], int]
) -> ReceivedReport | None:
    """The report a worker's message carries; None for a kind this server does not know.
    `rank_of` reads a run's rank from its lease id (the scheduler owns their form)."""
    kind = msg.WhichOneof("kind")
    if kind == "log_lines":
        return log_batch_from_pb(msg.log_lines, rank_of)
    if kind == "job_finished":
        return job_finished_from_pb(msg.job_finished, rank_of)
    read = _READ_REPORTS.get(kind) if kind is not None else None
    return read(getattr(msg, kind)) if read is not None else None


# ---------------------------------------------------------------- server -> worker

_ORDERS: Mapping[type, tuple[str, Callable[[Any], Any]]] = {
    RegisteredInfo: ("registered", registered_to_pb),
    ActionLeaseInfo: ("action_lease", action_lease_to_pb),
    CancelOrder: ("cancel_action", cancel_to_pb),
    JobLeaseInfo: ("job_lease", job_lease_to_pb),
    KillOrder: ("kill_job", kill_to_pb),
    LogAck: ("ack", ack_to_pb),
    LeaseRenewal: ("lease_renewal", renewal_to_pb),
    ResultAck: ("result_ack", result_ack_to_pb),
    InputOrder: ("job_input", input_to_pb),
}

_READ_ORDERS: Mapping[str, Callable[[Any], ServerOrder]] = {
    "registered": registered_from_pb,
    "action_lease": action_lease_from_pb,
    "cancel_action": cancel_from_pb,
    "job_lease": job_lease_from_pb,
    "kill_job": kill_from_pb,
    "ack": ack_from_pb,
    "lease_renewal": renewal_from_pb,
    "result_ack": result_ack_from_pb,
    "job_input": input_from_pb,
}


def order_to_pb(order: ServerOrder) -> w_pb2.ServerMessage:
    """The message the server writes for an order."""
    kind, convert = _ORDERS[type(order)]
    return w_pb2.ServerMessage(**{kind: convert(order)})


def order_from_pb(msg: w_pb2.ServerMessage) -> ServerOrder | UnknownOrder:
    """The order a server's message carries."""
    kind = msg.WhichOneof("kind")
    read = _READ_ORDERS.get(kind) if kind is not None else None
    if read is None:
        return UnknownOrder(kind=kind)
    return read(getattr(msg, kind))
