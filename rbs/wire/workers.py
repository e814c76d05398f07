"""The Workers protocol's version, and JobManifest <-> its typed protobuf message (rbs.v1.JobManifest).

The server builds each JobLease's manifest with `manifest_to_proto`; the worker reads it
back with `lease_manifest`. A message that does not make a valid manifest (a field a
newer or broken server set wrongly) is a `ManifestDecodeError` naming the field, never a
manifest with a silently defaulted value: the worker fails the run with that reason.

The stream's other messages have their typed values next door: `workers_session.py`
(envelopes, Register), `workers_actions.py`, `workers_jobs.py`, `workers_status.py`, and
the worker's end of the stream, `workers_stream.py`.
"""

from __future__ import annotations

import math
from typing import Any

from rbs import __version__
from rbs._proto.rbs.v1 import jobs_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.cas.digests import digest_from_pb, digest_to_pb, function_from_pb, function_to_pb
from rbs.cas.errors import InvalidDigest
from rbs.model import (
    MANIFEST_API_VERSION,
    ArraySpec,
    Dependency,
    DepKind,
    Digest,
    JobManifest,
    Resources,
)
from rbs.wire.cores import format_cores, parse_cores
from rbs.wire.errors import FailedPrecondition
from rbs.wire.manifest import job_path

# The version of the Workers stream's messages and their meaning. Bump it on any
# change an older peer would misread; worker and server must speak the same one.
# 1: JobLease.manifest_json (JSON text). 2: JobLease.manifest (typed), Register
# carries protocol_version. 3: the job lease (Registered.lease_ttl and kill_grace,
# LeaseRenewal), which a worker must enforce. 4: JobFinished.lines (a run's last log
# lines ride with its result), ResultAck.log_seq (one ack for both), and WorkerBatch /
# ServerBatch (what waits in an outbox goes as one message; rbs.wire.workers_batch).
WORKERS_PROTOCOL = 4
# What a Register without protocol_version (0) speaks: it predates the field.
_UNVERSIONED = 1

_KINDS: dict[DepKind, int] = {
    DepKind.AFTEROK: jobs_pb2.JobDependency.AFTEROK,
    DepKind.AFTERANY: jobs_pb2.JobDependency.AFTERANY,
    DepKind.AFTERNOTOK: jobs_pb2.JobDependency.AFTERNOTOK,
}
_KINDS_BACK: dict[int, DepKind] = {v: k for k, v in _KINDS.items()}


class ProtocolMismatch(FailedPrecondition):
    """A worker that speaks another Workers protocol than this server."""


class ManifestDecodeError(ValueError):
    """A JobManifest message that does not make a valid manifest; the message names the field."""


def _bad(field: str, value: object, problem: str) -> ManifestDecodeError:
    return ManifestDecodeError(f"job manifest field {field} = {value!r}: {problem}")


# ---------------------------------------------------------------- protocol version


def check_protocol(register: w_pb2.Register) -> None:
    """Refuse a Register from a worker speaking another protocol, saying how to fix it."""
    got = register.protocol_version
    if got == WORKERS_PROTOCOL:
        return
    speaks = (
        f"Workers protocol {got}"
        if got
        else f"Workers protocol {_UNVERSIONED} (it sends no protocol_version)"
    )
    who = register.name or register.hostname or register.worker_id or "?"
    raise ProtocolMismatch(
        f"worker {who} speaks {speaks} but this server speaks {WORKERS_PROTOCOL}: "
        "run the same rbs version on workers and server "
        f"(worker rbs {register.version or 'unknown'}, server rbs {__version__})"
    )


# ---------------------------------------------------------------- model -> proto


def manifest_to_proto(m: JobManifest) -> jobs_pb2.JobManifest:
    """The manifest as its typed message; every field is carried, defaults included."""
    pb = jobs_pb2.JobManifest(
        api_version=m.api_version,
        name=m.name,
        command=list(m.command),
        resources=jobs_pb2.JobResources(
            cpu_millis=m.resources.cpu_millis,
            memory_bytes=m.resources.memory_bytes,
            gpus=m.resources.gpus,
        ),
        queue=m.queue,
        priority=m.priority,
        nodes=m.nodes,
        elastic=m.elastic,
        max_retries=m.max_retries,
        requeue=m.requeue,
        env=[jobs_pb2.EnvVar(name=k, value=v) for k, v in m.env],
        outputs=list(m.outputs),
        dependencies=[
            jobs_pb2.JobDependency(kind=_KINDS[d.kind], job_id=d.job_id) for d in m.dependencies
        ],
        secrets=list(m.secrets),
        cpu_cores=format_cores(m.cpu_cores),
    )
    if m.max_iobps is not None:
        pb.max_iobps = m.max_iobps
    pb.preemptible = m.preemptible
    pb.interactive = m.interactive
    pb.pty = m.pty
    if m.input_root is not None:
        pb.input_root.CopyFrom(digest_to_pb(m.input_root))
        pb.input_root_digest_function = function_to_pb(m.input_root.function)
    if m.time_limit is not None:
        pb.time_limit_seconds = m.time_limit
    if m.min_nodes is not None:
        pb.min_nodes = m.min_nodes
    if m.max_nodes is not None:
        pb.max_nodes = m.max_nodes
    if m.checkpoint_dir is not None:
        pb.checkpoint_dir = m.checkpoint_dir
    if m.array is not None:
        pb.array.ranges.extend(
            jobs_pb2.ArrayRange(first=a, last=b, step=s) for a, b, s in m.array.ranges
        )
        if m.array.throttle is not None:
            pb.array.throttle = m.array.throttle
    if m.begin_time is not None:
        pb.begin_time = m.begin_time
    if m.requeue:
        pb.restarts = m.restarts
    if m.deadline is not None:
        pb.deadline = m.deadline
    if m.container is not None:
        pb.container = m.container
        pb.network = m.network
    return pb


# ---------------------------------------------------------------- proto -> model


def lease_manifest(lease: w_pb2.JobLease) -> JobManifest:
    """The manifest a job lease carries."""
    if not lease.HasField("manifest"):
        raise _bad(
            "manifest", None, "the job lease carries no manifest (a server older than the worker?)"
        )
    return manifest_from_proto(lease.manifest)


def manifest_from_proto(pb: jobs_pb2.JobManifest) -> JobManifest:
    """The manifest a message describes; a malformed value is a ManifestDecodeError."""
    if pb.api_version != MANIFEST_API_VERSION:
        raise _bad(
            "api_version", pb.api_version, f"unsupported; this rbs reads {MANIFEST_API_VERSION!r}"
        )
    if not pb.command or not pb.command[0]:
        raise _bad("command", list(pb.command), "empty; a job needs a program")
    if not pb.HasField("resources"):
        raise _bad("resources", None, "missing; every manifest sets it")
    r = pb.resources
    try:
        resources = Resources(cpu_millis=r.cpu_millis, memory_bytes=r.memory_bytes, gpus=r.gpus)
    except ValueError as e:
        shown = f"cpu_millis={r.cpu_millis} memory_bytes={r.memory_bytes} gpus={r.gpus}"
        raise _bad("resources", shown, str(e)) from None
    try:
        return JobManifest(
            api_version=pb.api_version,
            name=pb.name,
            command=tuple(pb.command),
            input_root=_input_root(pb),
            resources=resources,
            queue=pb.queue,
            priority=pb.priority,
            nodes=pb.nodes,
            elastic=pb.elastic,
            max_retries=pb.max_retries,
            requeue=pb.requeue,
            env=tuple((e.name, e.value) for e in pb.env),
            outputs=tuple(job_path(p, "manifest outputs") for p in pb.outputs),
            secrets=tuple(pb.secrets),
            cpu_cores=parse_cores(pb.cpu_cores, "manifest cpu_cores") if pb.cpu_cores else (),
            max_iobps=pb.max_iobps if pb.HasField("max_iobps") else None,
            preemptible=pb.preemptible,
            interactive=pb.interactive,
            pty=pb.pty,
            array=_array(pb),
            dependencies=tuple(_dependency(i, d) for i, d in enumerate(pb.dependencies)),
            **_optional_fields(pb),
        )
    except ManifestDecodeError:
        raise
    except ValueError as e:
        # JobManifest's own checks (name, queue, nodes, env) and job_path's say what is wrong.
        raise ManifestDecodeError(f"job manifest {pb.name!r}: {e}") from None


def _optional_fields(pb: jobs_pb2.JobManifest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if pb.HasField("time_limit_seconds"):
        out["time_limit"] = pb.time_limit_seconds
    for field in ("min_nodes", "max_nodes"):
        if pb.HasField(field):
            out[field] = getattr(pb, field)
    if pb.HasField("checkpoint_dir"):
        out["checkpoint_dir"] = job_path(pb.checkpoint_dir, "manifest checkpoint_dir")
    if pb.HasField("begin_time"):
        if not math.isfinite(pb.begin_time):
            raise _bad("begin_time", pb.begin_time, "not a finite epoch time")
        out["begin_time"] = pb.begin_time
    if pb.HasField("restarts"):
        out["restarts"] = pb.restarts
    if pb.HasField("deadline"):
        if not math.isfinite(pb.deadline):
            raise _bad("deadline", pb.deadline, "not a finite epoch time")
        out["deadline"] = pb.deadline
    if pb.HasField("container"):
        out["container"] = pb.container
        out["network"] = pb.network or "host"
    return out


def _input_root(pb: jobs_pb2.JobManifest) -> Digest | None:
    if not pb.HasField("input_root"):
        return None
    field = "input_root_digest_function"
    try:
        fn = function_from_pb(pb.input_root_digest_function)
    except InvalidDigest as e:
        raise _bad(field, pb.input_root_digest_function, str(e)) from None
    if fn is None:
        raise _bad(field, "UNKNOWN", "unset; it is set with every input_root (SHA256 or BLAKE3)")
    try:
        return digest_from_pb(pb.input_root, fn)
    except InvalidDigest as e:
        raise _bad("input_root", _text(pb.input_root), str(e)) from None


def _array(pb: jobs_pb2.JobManifest) -> ArraySpec | None:
    if not pb.HasField("array"):
        return None
    try:
        return ArraySpec(
            ranges=tuple((r.first, r.last, r.step) for r in pb.array.ranges),
            throttle=pb.array.throttle if pb.array.HasField("throttle") else None,
        )
    except ValueError as e:
        raise _bad("array", _text(pb.array), str(e)) from None


def _dependency(i: int, d: jobs_pb2.JobDependency) -> Dependency:
    kind = _KINDS_BACK.get(d.kind)
    if kind is None:
        raise _bad(f"dependencies[{i}].kind", d.kind, "want AFTEROK, AFTERANY or AFTERNOTOK")
    try:
        return Dependency(kind=kind, job_id=d.job_id)
    except ValueError as e:
        raise _bad(f"dependencies[{i}].job_id", d.job_id, str(e)) from None


def _text(msg: Any) -> str:
    """A message in one line of protobuf text format, for an error message."""
    from google.protobuf import text_format

    return text_format.MessageToString(msg, as_one_line=True)
