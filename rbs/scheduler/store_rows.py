"""Row codecs of the scheduler's journal (`rbs.scheduler.store`): records to SQLite rows and back.

A job's row is written again on every change of its state (each task of an array), while
its manifest and provenance change only when `rbs job update` replaces them (new objects).
`RowCodec` keeps their JSON for the jobs written lately and encodes them again only when
the record holds other objects than the kept ones (compared by identity), so a busy job's
row re-encodes only its body and an updated job's row carries its new manifest. It also
keeps the state each job's row was last written with: a row with the same manifest,
provenance and state is written as its body, reason and time alone (`body_only`), which
spares the indexes on the other columns a write per task of an array.
"""

from __future__ import annotations

import json
from typing import Any

from rbs.model import UNKNOWN_USER, JobManifest, JobState
from rbs.scheduler.instructions import (
    JobChange,
    JobRecord,
    NodeRecord,
    PoolRecord,
    TaskRecord,
    WorkerRecord,
)
from rbs.wire.manifest import manifest_from_json, manifest_to_json

# Jobs whose manifest and provenance JSON are kept (the ones written lately).
ENCODED_JOBS = 256


class RowCodec:
    """`job_row` with the manifest and provenance JSON of recent jobs kept, and whether
    a row may be written as the body alone (`body_only`)."""

    def __init__(self) -> None:
        self._encoded: dict[int, tuple[JobManifest, Any, str, str]] = {}
        self._written: dict[int, str] = {}  # job -> the state of its row as last written

    def forget(self) -> None:
        """After a failed write: what was kept may not be what the journal holds."""
        self._encoded.clear()
        self._written.clear()

    def job_row(self, r: JobRecord, now: float) -> tuple[Any, ...]:
        kept = self._encoded.get(r.job_id)
        if kept is None or kept[0] is not r.manifest or kept[1] is not r.provenance:
            kept = (
                r.manifest,
                r.provenance,
                manifest_to_json(r.manifest),
                json.dumps(r.provenance),
            )
            if len(self._encoded) >= ENCODED_JOBS:
                oldest = next(iter(self._encoded))  # the oldest written
                del self._encoded[oldest]
                self._written.pop(oldest, None)
            self._encoded[r.job_id] = kept
            self._written.pop(r.job_id, None)
        return job_row(r, now, kept[2], kept[3])

    def body_only(self, row: tuple[Any, ...]) -> bool:
        """Whether `row` (from `job_row`, about to be written) differs from the row last
        written for its job in its body, reason and time alone: the same manifest and
        provenance objects, the same state. Such a row needs no UPDATE of the indexed
        columns (state, queue, name), so SQLite leaves those indexes' pages alone. The
        caller calls `forget` when the write fails."""
        job_id, state = row[0], row[6]
        same: bool = self._written.get(job_id) == state
        self._written[job_id] = state
        return same


def job_row(r: JobRecord, now: float, manifest: str, provenance: str) -> tuple[Any, ...]:
    body = {
        "eligible_time": r.eligible_time,
        "time_limit": r.time_limit,
        "start_time": r.start_time,
        "end_time": r.end_time,
        "exit_code": r.exit_code,
        "attempts": r.attempts,
        "workers": list(r.workers),
        "signal": r.signal,
        "oom": r.oom,
        "peak_memory_bytes": r.peak_memory_bytes,
        "user": r.user,
        "parent": r.parent,
        "changes": [[c.action, c.by, c.at] for c in r.changes],
        "pool": {
            "range_i": r.pool.range_i,
            "next_value": r.pool.next_value,
            "retry": [list(t) for t in r.pool.retry],
            "skipped": list(r.pool.skipped),
            "counts": [list(c) for c in r.pool.counts],
        },
    }
    return (
        r.job_id,
        r.manifest.name,
        r.manifest.queue,
        manifest,
        provenance,
        r.submit_time,
        r.state.value,
        r.reason,
        json.dumps(body),
        now,
    )


def job_record(
    job_id: int,
    manifest: str,
    provenance: str,
    submit_time: float,
    state: str,
    reason: str | None,
    body: str,
) -> JobRecord:
    b = json.loads(body)
    p = b["pool"]
    return JobRecord(
        job_id=job_id,
        manifest=manifest_from_json(manifest),
        provenance=tuple((k, v) for k, v in json.loads(provenance)),
        submit_time=submit_time,
        eligible_time=b["eligible_time"],
        time_limit=b["time_limit"],
        state=JobState(state),
        reason=reason,
        start_time=b["start_time"],
        end_time=b["end_time"],
        exit_code=b["exit_code"],
        pool=PoolRecord(
            range_i=p["range_i"],
            next_value=p["next_value"],
            # Rows of an older journal have no restart count: none were counted then.
            retry=tuple((t[0], t[1], t[2], t[3] if len(t) > 3 else 0) for t in p["retry"]),
            skipped=tuple(p["skipped"]),
            counts=tuple((s, n) for s, n in p["counts"]),
        ),
        attempts=b["attempts"],
        workers=tuple(b["workers"]),
        signal=b["signal"],
        oom=b["oom"],
        peak_memory_bytes=b["peak_memory_bytes"],
        # Rows written before jobs had owners have none of these three.
        user=b.get("user", UNKNOWN_USER),
        parent=b.get("parent"),
        changes=tuple(JobChange(action=a, by=u, at=t) for a, u, t in b.get("changes", ())),
    )


def task_row(r: TaskRecord) -> tuple[Any, ...]:
    body = {
        "nodes": [
            [
                n.rank,
                n.worker_id,
                n.cpu_millis,
                n.memory_bytes,
                list(n.gpus),
                n.master_port,
                n.exited,
            ]
            for n in r.nodes
        ],
        "start_time": r.start_time,
        "confirmed_time": r.confirmed_time,
        "deadline": r.deadline,
        "end_time": r.end_time,
        "ending": r.ending,
        "retries_used": r.retries_used,
        "restarts_used": r.restarts_used,
        "reason": r.reason,
        "exit_code": r.exit_code,
        "signal": r.signal,
        "oom": r.oom,
        "peak_memory_bytes": r.peak_memory_bytes,
    }
    idx = -1 if r.index is None else r.index
    return (r.job_id, idx, r.attempt, r.state.value, int(r.active), json.dumps(body))


def task_record(
    job_id: int, idx: int, attempt: int, state: str, active: int, body: str
) -> TaskRecord:
    b = json.loads(body)
    return TaskRecord(
        job_id=job_id,
        index=None if idx < 0 else idx,
        attempt=attempt,
        state=JobState(state),
        nodes=tuple(
            NodeRecord(
                rank=rank,
                worker_id=wid,
                cpu_millis=cpu,
                memory_bytes=mem,
                gpus=tuple(gpus),
                master_port=port,
                exited=exited,
            )
            for rank, wid, cpu, mem, gpus, port, exited in b["nodes"]
        ),
        start_time=b["start_time"],
        confirmed_time=b["confirmed_time"],
        deadline=b["deadline"],
        end_time=b["end_time"],
        ending=b["ending"],
        retries_used=b["retries_used"],
        restarts_used=b.get("restarts_used", 0),
        reason=b.get("reason"),
        exit_code=b["exit_code"],
        signal=b["signal"],
        oom=b["oom"],
        peak_memory_bytes=b["peak_memory_bytes"],
        active=bool(active),
    )


def worker_body(r: WorkerRecord) -> dict[str, Any]:
    return {
        "hostname": r.hostname,
        "address": r.address,
        "cpu_millis": r.cpu_millis,
        "memory_bytes": r.memory_bytes,
        "gpus": list(r.gpus),
        "job_slots": r.job_slots,
        "master_ports": list(r.master_ports),
        "alive": r.alive,
    }


def worker_record(worker_id: str, body: str) -> WorkerRecord:
    b = json.loads(body)
    return WorkerRecord(
        worker_id=worker_id,
        hostname=b["hostname"],
        address=b["address"],
        cpu_millis=b["cpu_millis"],
        memory_bytes=b["memory_bytes"],
        gpus=tuple(b["gpus"]),
        job_slots=b["job_slots"],
        master_ports=(b["master_ports"][0], b["master_ports"][1]),
        alive=b["alive"],
    )
