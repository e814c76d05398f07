"""The hub's records of workers: a Register as the dispatcher sees it, and its JSON row."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from rbs.scheduler.dispatch_events import WorkerInfo
from rbs.wire.errors import InvalidRequest
from rbs.wire.workers_session import Registration


def worker_info(r: Registration) -> WorkerInfo:
    """What the dispatcher and the job driver know of a registered worker."""
    try:
        return WorkerInfo(
            worker_id=r.worker_id,
            name=r.name or r.hostname,
            hostname=r.hostname,
            address=r.address,
            cpus=r.cpus,
            memory_bytes=r.memory_bytes,
            gpu_ids=r.gpu_ids,
            build_slots=r.build_slots,
            job_slots=r.job_slots,
            container_runtimes=r.container_runtimes,
            version=r.version,
        )
    except ValueError as e:
        raise InvalidRequest(f"bad Register message: {e}") from None


def info_from_json(text: str) -> WorkerInfo:
    data: dict[str, Any] = json.loads(text)
    # Records written by another rbs version may have other fields: keep the known ones.
    known = {f.name for f in fields(WorkerInfo)}
    data = {k: v for k, v in data.items() if k in known}
    for key in ("gpu_ids", "container_runtimes"):
        data[key] = tuple(data.get(key, ()))
    return WorkerInfo(**data)
