"""The Workers Status call: rbs.v1.ClusterStatus <-> typed values, the call, its JSON.

The server builds a `ClusterStatusInfo` and answers with `status_to_pb`; `rbs remote
status` asks with `query_status` and prints `status_dict` for `--json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import timestamp_pb2

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs._proto.rbs.v1 import workers_pb2_grpc as w_grpc
from rbs.wire.auth import auth_metadata
from rbs.wire.workers_images import LocalImageInfo, image_from_pb, image_to_pb


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStatusInfo:
    """One worker as the server sees it (WorkerStatus)."""

    worker_id: str
    name: str = ""
    hostname: str = ""
    address: str = ""
    cpus: int = 0
    memory_bytes: int = 0
    gpu_ids: tuple[str, ...] = ()
    build_slots: int = 0
    build_slots_used: int = 0
    job_slots: int = 0
    job_slots_used: int = 0
    state: str = ""  # CONNECTED, DISCONNECTED or LOST
    last_heartbeat_ns: int = 0  # epoch nanoseconds
    version: str = ""
    container_runtimes: tuple[str, ...] = ()
    images: tuple[LocalImageInfo, ...] = ()  # its latest Images report
    can_pull_images: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterStatusInfo:
    """The cluster at a glance (ClusterStatus)."""

    workers: tuple[WorkerStatusInfo, ...] = ()
    queued_actions: int = 0
    running_actions: int = 0
    jobs_by_state: tuple[tuple[str, int], ...] = ()  # (state name, jobs): every state
    now_ns: int = 0  # the server's clock, epoch nanoseconds


def epoch_ns(seconds: float) -> int:
    """Epoch seconds as the nanoseconds a status carries."""
    return int(seconds * 1e9)


def _timestamp(ns: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(ns)
    return ts


def status_to_pb(s: ClusterStatusInfo) -> w_pb2.ClusterStatus:
    out = w_pb2.ClusterStatus(
        queued_actions=s.queued_actions,
        running_actions=s.running_actions,
        jobs_by_state=dict(s.jobs_by_state),
        now=_timestamp(s.now_ns),
    )
    for w in s.workers:
        out.workers.append(
            w_pb2.WorkerStatus(
                worker_id=w.worker_id,
                name=w.name,
                hostname=w.hostname,
                address=w.address,
                cpus=w.cpus,
                memory_bytes=w.memory_bytes,
                gpu_ids=list(w.gpu_ids),
                build_slots=w.build_slots,
                build_slots_used=w.build_slots_used,
                job_slots=w.job_slots,
                job_slots_used=w.job_slots_used,
                state=w.state,
                last_heartbeat=_timestamp(w.last_heartbeat_ns),
                version=w.version,
                container_runtimes=list(w.container_runtimes),
                images=[image_to_pb(i) for i in w.images],
                can_pull_images=w.can_pull_images,
            )
        )
    return out


def status_from_pb(pb: w_pb2.ClusterStatus) -> ClusterStatusInfo:
    return ClusterStatusInfo(
        workers=tuple(
            WorkerStatusInfo(
                worker_id=w.worker_id,
                name=w.name,
                hostname=w.hostname,
                address=w.address,
                cpus=w.cpus,
                memory_bytes=w.memory_bytes,
                gpu_ids=tuple(w.gpu_ids),
                build_slots=w.build_slots,
                build_slots_used=w.build_slots_used,
                job_slots=w.job_slots,
                job_slots_used=w.job_slots_used,
                state=w.state,
                last_heartbeat_ns=w.last_heartbeat.ToNanoseconds(),
                version=w.version,
                container_runtimes=tuple(w.container_runtimes),
                images=tuple(image_from_pb(i) for i in w.images),
                can_pull_images=w.can_pull_images,
            )
            for w in pb.workers
        ),
        queued_actions=pb.queued_actions,
        running_actions=pb.running_actions,
        jobs_by_state=tuple(sorted(pb.jobs_by_state.items())),
        now_ns=pb.now.ToNanoseconds(),
    )


def query_status(channel: grpc.Channel, *, token: str | None, timeout: float) -> ClusterStatusInfo:
    """Ask a server for its status (blocking); gRPC errors pass through."""
    reply = w_grpc.WorkersStub(channel).Status(
        w_pb2.StatusRequest(), metadata=auth_metadata(token), timeout=timeout
    )
    return status_from_pb(reply)


def _time_text(ns: int) -> str:
    text: str = _timestamp(ns).ToJsonString()
    return text


def status_dict(s: ClusterStatusInfo) -> dict[str, Any]:
    """The status as plain JSON types (proto JSON would print int64 values as strings)."""
    return {
        "now": _time_text(s.now_ns),
        "queued_actions": s.queued_actions,
        "running_actions": s.running_actions,
        "jobs_by_state": dict(s.jobs_by_state),
        "workers": [
            {
                "worker_id": w.worker_id,
                "name": w.name,
                "hostname": w.hostname,
                "address": w.address,
                "state": w.state,
                "cpus": w.cpus,
                "memory_bytes": w.memory_bytes,
                "gpu_ids": list(w.gpu_ids),
                "build_slots": w.build_slots,
                "build_slots_used": w.build_slots_used,
                "job_slots": w.job_slots,
                "job_slots_used": w.job_slots_used,
                "last_heartbeat": _time_text(w.last_heartbeat_ns),
                "version": w.version,
                "container_runtimes": list(w.container_runtimes),
                "images": [
                    {"image_id": i.image_id, "names": list(i.names), "size_bytes": i.size_bytes}
                    for i in w.images
                ],
                "can_pull_images": w.can_pull_images,
            }
            for w in s.workers
        ],
    }
