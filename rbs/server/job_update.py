"""`POST /v1/jobs/{id}/update`: change a pending job's --begin, --priority, --time or --queue.

The flags are layered over the job's manifest as at submit (rbs.wire.manifest.apply_flags,
so a bad value names its flag), the core checks and applies the result (an `Update` event:
rbs.scheduler.update), and a `sys` line in the job's log says who changed what. The line
belongs to attempt 0, the job before it first runs, so no worker's numbering meets it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rbs.model import JobManifest, LogLine, LogStream
from rbs.scheduler.events import Update
from rbs.server.job_driver import JobDriver, JobRequestError
from rbs.units import SpecError, format_duration
from rbs.wire.manifest import apply_flags


def _shown(m: JobManifest, flag: str) -> str:
    if flag == "--begin":
        when = m.begin_time
        return "none" if when is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
    if flag == "--time":
        return format_duration(m.time_limit) if m.time_limit else "none"
    return str(m.priority if flag == "--priority" else m.queue)


async def update_job(
    driver: JobDriver, job_id: int, flags: Mapping[str, Any], by: str, admin: bool
) -> None:
    """Apply `flags` to pending job `job_id` for user `by`; a JobRequestError if refused."""
    view = driver.view(job_id)
    try:
        new, prov = apply_flags(view.manifest, dict(view.provenance), flags)
    except SpecError as e:
        raise JobRequestError(str(e)) from None
    changed = {f: (_shown(view.manifest, f), _shown(new, f)) for f in flags}
    if "--time" in changed and view.manifest.time_limit is None and view.time_limit:
        default = f"{format_duration(view.time_limit)} (from queue {view.manifest.queue})"
        changed["--time"] = (default, changed["--time"][1])
    # `_call` answers with the job id, or raises the core's refusal (JobRequestError).
    await driver._call(
        Update(job_id=job_id, manifest=new, provenance=tuple(prov.items()), by=by, admin=admin)
    )
    what = ", ".join(f"{f} {old} -> {now}" for f, (old, now) in changed.items() if old != now)
    note_line(driver, job_id, f"updated by {by}: {what or 'nothing changed'}")


def note_line(
    driver: JobDriver, job_id: int, text: str, index: int | None = None, attempt: int = 0
) -> None:
    """A `sys` line in one attempt's part of the job's log (attempt 0: before it runs)."""
    logs = driver.logs
    key = (-1 if index is None else index, attempt, 0)  # the log's RunKey: task, attempt, rank
    high = max((hi for _, hi in logs._stored(job_id, key)), default=0)
    # Numbered far above a worker's own numbers for a running attempt, which the log
    # would otherwise take for lines it already has (1 << 30: as the scheduler's notes).
    line = LogLine(
        seq=max(high, 0 if attempt == 0 else 1 << 30) + 1,
        time=time.time(),
        stream=LogStream.SYS,
        text=text,
        task=index,
        attempt=attempt,
    )
    logs.append(job_id, [line])
    logs.wake(job_id)
