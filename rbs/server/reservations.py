"""Maintenance reservations and drains: `rbs job reserve`, `rbs remote drain` (server side).

The server keeps them in `<data_dir>/reservations.json` (rewritten whole, atomically) and
hands the core all of them as one `SetWindows` event at start, on every change and when
one ends (the core's rules: rbs.scheduler.windows). When a window starts, each job then
running on an affected worker gets a line in its log: it keeps running, as in Slurm;
and the action dispatcher leases the worker no new build actions until it ends.
Only an admin makes or cancels them.

Routes (JSON, under the jobs API's auth):

    GET    /v1/reservations                     -> {"reservations": [...]}
    POST   /v1/reservations  {"name", "start", "end", "workers", "reason"} -> reservation
    DELETE /v1/reservations/{name}              -> {"cancelled": name}
    POST   /v1/workers/{id}/drain {"reason"}    -> reservation (drain:ID, no end)
    POST   /v1/workers/{id}/resume              -> {"cancelled": "drain:ID"}
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from rbs.model import JobState
from rbs.scheduler.events import SetWindows, Window
from rbs.server.job_driver import JobDriver, JobRequestError
from rbs.server.job_update import note_line
from rbs.wire.auth import Principal, Role
from rbs.wire.errors import PermissionDenied

log = logging.getLogger(__name__)

CHECK_S = 1.0  # how often window starts and ends are looked for
DRAIN = "drain:"


def window_doc(w: Window) -> dict[str, Any]:
    return {
        "name": w.name,
        "start": w.start,
        "end": None if math.isinf(w.end) else w.end,
        "workers": sorted(w.workers),
        "reason": w.reason,
    }


def _window(doc: Any) -> Window:
    if not isinstance(doc, dict):
        raise JobRequestError('want {"name", "start", "end", "workers", "reason"}')
    try:
        end = math.inf if doc.get("end") is None else float(doc["end"])
        return Window(
            name=str(doc["name"]),
            start=float(doc["start"]),
            end=end,
            workers=frozenset(str(w) for w in doc.get("workers") or ()),
            reason=str(doc.get("reason") or ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise JobRequestError(f"not a reservation: {e}") from None


async def _body(request: web.Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise JobRequestError("the body is not JSON") from None


class Reservations:
    """The windows on disk, the core told of them, and the jobs API routes for them."""

    def __init__(self, data_dir: Path, driver: JobDriver) -> None:
        self.path = data_dir / "reservations.json"
        self.driver = driver
        self.windows: dict[str, Window] = {}
        self._started: set[str] = set()  # windows whose start was noted in job logs
        self._task: asyncio.Task[None] | None = None
        if self.path.exists():
            for doc in json.loads(self.path.read_text()).get("reservations", []):
                w = _window(doc)
                self.windows[w.name] = w
                if w.start <= time.time():
                    self._started.add(w.name)  # noted before the restart, or missed

    def draining(self, worker_id: str, now: float) -> Window | None:
        """The window the worker is in at `now` (for `rbs remote status`), if any."""
        return next(
            (w for w in self.windows.values() if w.start <= now < w.end and w.affects(worker_id)),
            None,
        )

    def is_draining(self, worker_id: str) -> bool:
        return self.draining(worker_id, time.time()) is not None

    # ---- changes

    def worker_id(self, given: str) -> str:
        """A worker id, or the name (`--name`) of exactly one known worker: its id."""
        views = [v.info for v in self.driver.hub.workers()]
        named = [i.worker_id for i in views if i.name == given]
        if any(i.worker_id == given for i in views) or len(named) != 1:
            return given
        return named[0]

    def add(self, w: Window, now: float) -> Window:
        w = dataclasses.replace(w, workers=frozenset(self.worker_id(x) for x in w.workers))
        known = {v.info.worker_id for v in self.driver.hub.workers()}
        unknown = sorted(w.workers - known)
        if unknown:
            names = ", ".join(sorted(known)) or "none connected"
            raise JobRequestError(f"unknown worker {', '.join(unknown)}; workers: {names}")
        if w.name in self.windows:
            raise JobRequestError(f"a reservation named {w.name!r} exists; cancel it first")
        if w.end <= now or (w.start < now - 5 and not w.name.startswith(DRAIN)):
            raise JobRequestError(
                f"reservation {w.name}: its start is in the past; give --in DURATION "
                "(30m, 2h) or --at a time to come"
            )
        clash = next(
            (o for o in self.windows.values() if not o.name.startswith(DRAIN) and o.overlaps(w)),
            None,
        )
        if clash is not None and not w.name.startswith(DRAIN):
            raise JobRequestError(
                f"reservation {w.name} overlaps {clash.name} (workers and times); move it "
                "with --in/--for, or name other --workers"
            )
        self.windows[w.name] = w
        self._changed()
        return w

    def cancel(self, name: str) -> None:
        if self.windows.pop(name, None) is None:
            known = ", ".join(sorted(self.windows)) or "none"
            raise JobRequestError(f"no reservation named {name!r} (known: {known})", "NOT_FOUND")
        self._started.discard(name)
        self._changed()

    def _changed(self) -> None:
        doc = {"reservations": [window_doc(w) for w in self.windows.values()]}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        os.replace(tmp, self.path)
        self.publish()

    def publish(self) -> None:
        self.driver._post(SetWindows(windows=tuple(self.windows.values())))
        self.hold_builds()

    def hold_builds(self) -> None:
        """Lease build actions to no worker in a window now (idempotent: each check)."""
        for view in self.driver.hub.workers():
            wid = view.info.worker_id
            self.driver.hub.set_draining(wid, self.is_draining(wid))

    # ---- time passing

    def start(self) -> None:
        self.publish()
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self) -> None:
        for _ in iter(int, 1):  # until cancelled: stop()
            await asyncio.sleep(CHECK_S)
            try:
                self.check(time.time())
            except Exception:  # a bad tick must not end the watch
                log.exception("maintenance windows check failed")

    def check(self, now: float) -> None:
        """Note window starts in running jobs' logs; drop ended windows and tell the core."""
        for w in list(self.windows.values()):
            if w.start <= now and w.name not in self._started:
                self._started.add(w.name)
                self._note_start(w)
        self.hold_builds()
        ended = [w.name for w in self.windows.values() if w.end <= now]
        for name in ended:
            del self.windows[name]
            self._started.discard(name)
        if ended:
            self._changed()

    def _note_start(self, w: Window) -> None:
        for job_id, state in self.driver.states():
            if state is not JobState.RUNNING:
                continue
            view = self.driver.sched.job(job_id)
            for run in view.runs:
                if any(w.affects(n.worker_id) for n in run.nodes):
                    why = f" ({w.reason})" if w.reason else ""
                    text = (
                        f"maintenance window {w.name}{why} starts on this job's workers; "
                        "the job keeps running, and nothing new starts there until it ends"
                    )
                    note_line(self.driver, job_id, text, run.index, run.attempt)

    # ---- routes

    def add_routes(self, app: web.Application, principal: web.RequestKey[Principal]) -> None:
        def admin(request: web.Request) -> str:
            p = request[principal]
            if not p.has(Role.ADMIN):
                raise PermissionDenied("maintenance reservations and drains take the admin role")
            return p.user

        async def listing(request: web.Request) -> web.Response:
            docs = [window_doc(w) for w in sorted(self.windows.values(), key=lambda w: w.start)]
            return web.json_response({"reservations": docs})

        async def create(request: web.Request) -> web.Response:
            admin(request)
            w = self.add(_window(await _body(request)), time.time())
            return web.json_response(window_doc(w))

        async def delete(request: web.Request) -> web.Response:
            admin(request)
            self.cancel(request.match_info["name"])
            return web.json_response({"cancelled": request.match_info["name"]})

        async def drain(request: web.Request) -> web.Response:
            admin(request)
            wid = self.worker_id(request.match_info["id"])
            body = await _body(request) if request.can_read_body else {}
            reason = str(body.get("reason") or "drained") if isinstance(body, dict) else ""
            now = time.time()
            w = Window(name=DRAIN + wid, start=now, end=math.inf, workers=frozenset([wid]),
                       reason=reason)  # fmt: skip
            return web.json_response(window_doc(self.add(w, now)))

        async def resume(request: web.Request) -> web.Response:
            admin(request)
            name = DRAIN + self.worker_id(request.match_info["id"])
            self.cancel(name)
            return web.json_response({"cancelled": name})

        r = app.router
        r.add_get("/v1/reservations", listing)
        r.add_post("/v1/reservations", create)
        r.add_delete("/v1/reservations/{name}", delete)
        r.add_post("/v1/workers/{id}/drain", drain)
        r.add_post("/v1/workers/{id}/resume", resume)
