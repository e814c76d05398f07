"""The jobs HTTP API's JSON documents: the server's builders and the client's readers, side by side.

Every document the API answers with is defined once, three ways that must agree: the
function the server builds it with (`job_doc`, `queues_doc`, ...), the function the
client reads it with (`job_info`, `log_line`, ...), and its JSON Schema in
rbs.wire.jobs_api_schema (tests hold every real response to it). docs/design/jobs.md
lists the routes.

The request bodies, paths and queries are in rbs.wire.jobs_api_requests, the same way.

This module is on the path of `rbs job submit`, which must start in a few milliseconds,
so it imports nothing at run time (the builders that write JSON text import `json`
themselves; json and the re it imports cost a submit ~6 ms): no dataclasses (it pulls
in inspect, ~6 ms here), no typing, no protobuf. The server hands the builders its scheduler views
as they are; the `...Facts` protocols below say which attributes a builder reads
(checked by mypy, free at run time), since the wire layer sits below the scheduler's
and may not import it. JobInfo is a slotted class for the same reason, and rbs.model
(log lines, job states) is imported only by the calls that need it.
"""

from __future__ import annotations

# Not imported from typing, which costs `rbs job submit` start-up for nothing at run
# time; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Protocol

    from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
    from rbs.model import JobManifest, JobState, LogLine

    class PriorityFacts(Protocol):
        @property
        def base(self) -> int: ...
        @property
        def queue_weight(self) -> int: ...
        @property
        def age_bonus(self) -> int: ...
        @property
        def total(self) -> int: ...

    class ArrayFacts(Protocol):
        @property
        def spec(self) -> str: ...
        @property
        def total(self) -> int: ...
        @property
        def pending(self) -> int: ...
        @property
        def running(self) -> int: ...
        @property
        def finished(self) -> Sequence[tuple[str, int]]: ...

    class NodeFacts(Protocol):
        @property
        def worker_id(self) -> str: ...
        @property
        def gpus(self) -> Sequence[str]: ...

    class RunFacts(Protocol):
        @property
        def index(self) -> int | None: ...
        @property
        def attempt(self) -> int: ...
        @property
        def state(self) -> JobState: ...
        @property
        def nodes(self) -> Sequence[NodeFacts]: ...

    class AttemptFacts(RunFacts, Protocol):
        """One attempt of a task from the journal (the scheduler's TaskRecord)."""

        @property
        def start_time(self) -> float: ...
        @property
        def end_time(self) -> float | None: ...
        @property
        def exit_code(self) -> int | None: ...
        @property
        def signal(self) -> int | None: ...
        @property
        def reason(self) -> str | None: ...

    class JobFacts(Protocol):
        """What `job_doc` reads: the scheduler's JobView has all of it."""

        @property
        def job_id(self) -> int: ...
        @property
        def name(self) -> str: ...
        @property
        def queue(self) -> str: ...
        @property
        def state(self) -> JobState: ...
        @property
        def reason(self) -> str | None: ...
        @property
        def priority(self) -> PriorityFacts: ...
        @property
        def manifest(self) -> JobManifest: ...
        @property
        def provenance(self) -> Sequence[tuple[str, str]]: ...
        @property
        def time_limit(self) -> int | None: ...
        @property
        def dependencies(self) -> Sequence[tuple[str, JobState]]: ...
        @property
        def array(self) -> ArrayFacts | None: ...
        @property
        def attempts(self) -> int: ...
        @property
        def workers(self) -> Sequence[str]: ...
        @property
        def runs(self) -> Sequence[RunFacts]: ...
        @property
        def exit_code(self) -> int | None: ...
        @property
        def signal(self) -> int | None: ...
        @property
        def oom(self) -> bool: ...
        @property
        def peak_memory_bytes(self) -> int | None: ...
        @property
        def submit_time(self) -> float: ...
        @property
        def eligible_time(self) -> float | None: ...
        @property
        def start_time(self) -> float | None: ...
        @property
        def end_time(self) -> float | None: ...
        @property
        def user(self) -> str: ...
        @property
        def parent(self) -> int | None: ...
        @property
        def changes(self) -> Sequence[ChangeFacts]: ...

    class ChangeFacts(Protocol):
        @property
        def action(self) -> str: ...
        @property
        def by(self) -> str: ...
        @property
        def at(self) -> float: ...

    class QueueFacts(Protocol):
        """What `queues_doc` reads: the scheduler's QueueView has all of it."""

        @property
        def name(self) -> str: ...
        @property
        def priority_weight(self) -> int: ...
        @property
        def default_time_limit(self) -> int | None: ...
        @property
        def max_time_limit(self) -> int | None: ...
        @property
        def pending_jobs(self) -> int: ...
        @property
        def running_jobs(self) -> int: ...
        @property
        def pending_tasks(self) -> int: ...
        @property
        def running_tasks(self) -> int: ...


# ---------------------------------------------------------------- server: facts -> documents


def job_doc(v: JobFacts, history: Sequence[AttemptFacts] = ()) -> dict[str, Any]:
    """One job, as `show`, `wait` and every item of `list` answer it; `history` (every
    attempt, from the journal) is filled by `show` and `wait` only."""
    from rbs.units import format_cpu, format_duration, format_size
    from rbs.wire.manifest import manifest_to_dict

    m = v.manifest
    return {
        "job_id": str(v.job_id),
        "name": v.name,
        "queue": v.queue,
        "state": v.state.value,
        "reason": v.reason,
        "priority": {
            "base": v.priority.base,
            "queue_weight": v.priority.queue_weight,
            "age_bonus": v.priority.age_bonus,
            "total": v.priority.total,
        },
        "manifest": manifest_to_dict(m),
        "provenance": dict(v.provenance),
        "resources": {
            "cpu": format_cpu(m.resources.cpu_millis),
            "memory": format_size(m.resources.memory_bytes),
            "gpus": m.resources.gpus,
        },
        "time_limit": format_duration(v.time_limit) if v.time_limit else None,
        "dependencies": [{"dep": d, "state": s.value} for d, s in v.dependencies],
        "array": None
        if v.array is None
        else {
            "spec": v.array.spec,
            "total": v.array.total,
            "pending": v.array.pending,
            "running": v.array.running,
            "finished": dict(v.array.finished),
        },
        "attempts": v.attempts,
        "workers": list(v.workers),
        "runs": [
            {
                "task": r.index,
                "attempt": r.attempt,
                "state": r.state.value,
                "workers": [n.worker_id for n in r.nodes],
                "gpus": [list(n.gpus) for n in r.nodes],
            }
            for r in v.runs
        ],
        "history": [
            {
                "task": a.index,
                "attempt": a.attempt,
                "state": a.state.value,
                "reason": a.reason,
                "workers": [n.worker_id for n in a.nodes],
                "start_time": a.start_time,
                "end_time": a.end_time,
                "exit_code": a.exit_code,
                "signal": a.signal,
            }
            for a in history
        ],
        "exit_code": v.exit_code,
        "signal": v.signal,
        "oom": v.oom,
        "peak_memory_bytes": v.peak_memory_bytes,
        "submit_time": v.submit_time,
        "eligible_time": v.eligible_time,
        "start_time": v.start_time,
        "end_time": v.end_time,
        "user": v.user,
        "parent": None if v.parent is None else str(v.parent),
        "changes": [{"action": c.action, "by": c.by, "time": c.at} for c in v.changes],
    }


def jobs_doc(
    views: Iterable[JobFacts], *, total: int, next_cursor: str | None = None
) -> dict[str, Any]:
    """One page of a listing: its jobs, how many jobs match in all, and the cursor that
    asks for the next page (None on the last)."""
    return {"jobs": [job_doc(v) for v in views], "total": total, "next_cursor": next_cursor}


def submitted_doc(job_id: int) -> dict[str, Any]:
    return {"job_id": str(job_id)}


def cancelled_doc(ids: Iterable[object]) -> dict[str, Any]:
    """The job and task ids (`ID`, `ID_INDEX`) a cancel named."""
    return {"cancelled": [str(i) for i in ids]}


def outputs_doc(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Output trees per task: each record has task (None unless an array), attempt, digest."""
    return {"outputs": [dict(r) for r in records]}


def queues_doc(queues: Iterable[QueueFacts]) -> dict[str, Any]:
    from rbs.units import format_duration

    return {
        "queues": [
            {
                "name": q.name,
                "priority_weight": q.priority_weight,
                "default_time_limit": format_duration(q.default_time_limit)
                if q.default_time_limit
                else None,
                "max_time_limit": format_duration(q.max_time_limit) if q.max_time_limit else None,
                "pending_jobs": q.pending_jobs,
                "running_jobs": q.running_jobs,
                "pending_tasks": q.pending_tasks,
                "running_tasks": q.running_tasks,
            }
            for q in queues
        ]
    }


def status_doc(status: w_pb2.ClusterStatus) -> dict[str, Any]:
    """The cluster at a glance: rbs.v1.ClusterStatus in protobuf's JSON mapping."""
    from google.protobuf import json_format

    doc: dict[str, Any] = json_format.MessageToDict(status, preserving_proto_field_name=True)
    return doc


def error_doc(code: str, message: str) -> dict[str, Any]:
    """Every route's error: a gRPC-style code name and a message a person can act on."""
    return {"error": {"code": code, "message": message}}


def log_lines_payload(lines: Iterable[LogLine]) -> bytes:
    """A job's stored log lines as NDJSON, one object per line (`eol` stays on the server)."""
    import json

    quote = json.encoder.encode_basestring  # json.dumps's string form (ensure_ascii=False)
    lines = list(lines)
    return log_columns_payload(
        [ln.seq for ln in lines],
        [repr(ln.time) for ln in lines],
        [ln.stream.value for ln in lines],
        [quote(ln.text) for ln in lines],
        [(ln.task, ln.attempt, ln.rank) for ln in lines],
    )


def log_columns_payload(
    seqs: Iterable[int],
    times: Iterable[str],
    streams: Iterable[str],
    texts: Iterable[str],
    runs: Iterable[tuple[int | None, int, int]],
) -> bytes:
    """The NDJSON of `log_lines_payload`, byte for byte, from columns already in their
    JSON forms (the log store keeps them so): `times` as the floats' repr, `texts` as
    JSON string literals (`json.encoder.encode_basestring`). No LogLine per line and no
    formatting but the seq: each object is what `json.dumps` makes of {seq, time, stream,
    text, task, attempt, rank}, each run's closing fields formatted once."""
    import json

    ends: dict[tuple[int | None, int, int], str] = {}
    mids = {name: f', "stream": "{name}", "text": ' for name in ("out", "err", "sys")}
    out = []
    last: object = None
    end = ""
    for seq, t, stream, text, run in zip(seqs, times, streams, texts, runs, strict=True):
        if run is not last:  # a block's lines mostly share one run tuple
            last = run
            found = ends.get(run)
            if found is None:
                task = "null" if run[0] is None else str(run[0])
                found = ends[run] = f', "task": {task}, "attempt": {run[1]}, "rank": {run[2]}}}\n'
            end = found
        mid = mids.get(stream) or f', "stream": {json.dumps(stream)}, "text": '
        out.append(f'{{"seq": {seq}, "time": {t}{mid}{text}{end}')
    return "".join(out).encode()


def log_end_payload(state: JobState) -> bytes:
    """The NDJSON line that ends a log: every line of the job up to `state` came before it."""
    import json

    return json.dumps({"end": True, "state": state.value}).encode() + b"\n"


# ---------------------------------------------------------------- client: documents -> objects


class JobInfo:
    """A job as the server reports it; `raw` holds every field of `rbs job show --json`."""

    __slots__ = ("exit_code", "job_id", "name", "queue", "raw", "reason", "state")

    def __init__(
        self,
        *,
        job_id: str,
        name: str,
        state: str,
        reason: str | None,
        queue: str,
        exit_code: int | None,
        raw: Mapping[str, Any],
    ) -> None:
        self.job_id = job_id
        self.name = name
        self.state = state
        self.reason = reason
        self.queue = queue
        self.exit_code = exit_code
        self.raw = raw

    def __repr__(self) -> str:
        return f"JobInfo(job_id={self.job_id!r}, name={self.name!r}, state={self.state!r})"

    @property
    def done(self) -> bool:
        from rbs.model import TERMINAL_STATES

        return self.state in {s.value for s in TERMINAL_STATES}

    @property
    def ok(self) -> bool:
        from rbs.model import JobState

        return self.state == JobState.COMPLETED.value

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobInfo:
        return cls(
            job_id=str(data["job_id"]),
            name=str(data.get("name", "")),
            state=str(data["state"]),
            reason=data.get("reason"),
            queue=str(data.get("queue", "")),
            exit_code=data.get("exit_code"),
            raw=data,
        )


def submitted_id(doc: Mapping[str, Any]) -> str:
    """The job id a submit answered."""
    return str(doc["job_id"])


def job_info(doc: Mapping[str, Any]) -> JobInfo:
    return JobInfo.from_json(doc)


def job_infos(doc: Mapping[str, Any]) -> list[JobInfo]:
    return [JobInfo.from_json(j) for j in doc["jobs"]]


def job_page(doc: Mapping[str, Any]) -> tuple[list[JobInfo], int, str | None]:
    """A listing page as (its jobs, how many match in all, the next page's cursor)."""
    infos = job_infos(doc)
    return infos, int(doc.get("total", len(infos))), doc.get("next_cursor")


def log_line(doc: Mapping[str, Any]) -> LogLine | None:
    """One NDJSON line of a log: a LogLine, or None for the end marker."""
    if doc.get("end"):
        return None
    from rbs.model import LogLine, LogStream

    return LogLine(
        seq=doc["seq"],
        time=doc["time"],
        stream=LogStream(doc["stream"]),
        text=doc["text"],
        task=doc.get("task"),
        attempt=doc.get("attempt", 1),
        rank=doc.get("rank", 0),
    )


def log_line_json(line: LogLine) -> str:
    """A line as `rbs job logs --json` prints it: the API's fields less `rank`, and `task`
    only for an array job."""
    import json

    d: dict[str, Any] = {
        "seq": line.seq,
        "time": line.time,
        "stream": line.stream.value,
        "text": line.text,
    }
    if line.task is not None:
        d["task"] = line.task
    d["attempt"] = line.attempt
    return json.dumps(d, ensure_ascii=False)


def cancelled_ids(doc: Mapping[str, Any]) -> list[str]:
    return list(doc["cancelled"])


def output_records(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(doc["outputs"])


def queue_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(doc["queues"])


def status_fields(doc: Mapping[str, Any]) -> dict[str, Any]:
    return dict(doc)
