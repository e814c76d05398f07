"""GET /v1/jobs/{id}/attach: an interactive job's terminal, as one websocket.

`rbs job submit -i` and `rbs job attach` (docs/design/interactive.md). The request is
authenticated by the jobs API's middleware like every route; the job's owner (or an
admin) alone may attach, as for a cancel, since stdin is a way to act on the job.

Server -> client: text frames of the log's NDJSON (the same lines as GET .../logs),
from `after` (a seq; "now": from the current end, as `sattach` does), then the end
marker once the job is terminal, and the socket closes.
Client -> server: binary frames are stdin bytes; text frames are JSON controls:
`{"eof": true}` (close the job's stdin), `{"signal": N}` (send the job signal N),
`{"cancel": true}` (cancel the job), and for a --pty job `{"winsize": [rows, cols]}`
(its terminal's size). A --pty job's output comes instead as binary frames of the
raw bytes its terminal got (rbs.server.job_pty), then the end marker. Input waits until the job is RUNNING (the
socket is not read meanwhile, so a fast writer waits), then goes to the worker that runs rank 0 of each task as a JobInput order,
and from it to the run supervisor, which feeds the job's stdin pipe.
A client that goes away changes nothing for the job: it keeps running, and a later
attach carries on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from rbs.model import JobState
from rbs.scheduler.events import TaskRef
from rbs.server.job_pty import Subscriber, streams_of
from rbs.wire import jobs_api
from rbs.wire.auth import owner_refusal
from rbs.wire.errors import InvalidRequest, PermissionDenied
from rbs.wire.workers_jobs import InputOrder

if TYPE_CHECKING:
    from rbs.server.job_driver import JobDriver
    from rbs.wire.auth import Principal

log = logging.getLogger(__name__)

# One stdin frame at most (a terminal sends bytes; a pipe sends up to 64 KiB reads).
MAX_FRAME = 1 << 20
MAX_WINSIZE = 10000  # rows or columns of a terminal, at most
ATTACH_PATH = "/v1/jobs/{id}/attach"


class Attach:
    """The route; `driver` is the server's JobDriver."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver

    async def handle(self, request: web.Request, p: Principal, job_id: int) -> web.StreamResponse:
        self.driver.state_of(job_id)  # NOT_FOUND for an unknown job
        v = self.driver.view(job_id)
        reason = owner_refusal(p, job_id, v.user, v.parent)
        if reason is not None:
            raise PermissionDenied(reason)
        after = self._after(job_id, request.query.get("after", "0"))
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, heartbeat=20.0)
        await ws.prepare(request)
        streams = streams_of(self.driver)
        sub = streams.subscribe(job_id) if v.manifest.pty else None
        if sub is not None:
            pump = asyncio.create_task(self._pty_output(ws, job_id, sub))
        else:
            pump = asyncio.create_task(self._output(ws, job_id, after))
        try:
            await self._input(ws, job_id, p.user)
            await pump  # the client closed its writing side: output still goes on
        finally:
            if sub is not None:
                streams.unsubscribe(job_id, sub)
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            await ws.close()
        return ws

    def _after(self, job_id: int, text: str) -> int:
        if text == "now":
            _, last = self.driver.logs.read_payload(job_id, tail=1)
            return last or 0
        try:
            return max(0, int(text))
        except ValueError:
            raise InvalidRequest(f"after={text!r}: want a log seq or 'now'") from None

    async def _output(self, ws: web.WebSocketResponse, job_id: int, after: int) -> None:
        logs = self.driver.logs
        while not ws.closed:
            payload, last = logs.read_payload(job_id, after=after)
            if last is not None:
                after = last
                await ws.send_str(payload.decode())
                continue
            if self.driver.state_of(job_id).terminal:
                break
            await logs.wait(job_id, 1.0)
        if not ws.closed:
            state = self.driver.state_of(job_id)
            await ws.send_str(jobs_api.log_end_payload(state).decode())
            await ws.close()

    async def _pty_output(self, ws: web.WebSocketResponse, job_id: int, sub: Subscriber) -> None:
        """A --pty job's raw output as binary frames until it ends, then the end marker."""
        ending = False
        while not ws.closed:
            await sub.wait(1.0)
            if sub.dropped:
                note = f"\r\n[rbs: {sub.dropped} bytes of output dropped: read too slowly]\r\n"
                sub.dropped = 0
                await ws.send_bytes(note.encode())
            data = sub.take()
            if data:
                await ws.send_bytes(data)
            elif ending:
                break
            elif self.driver.state_of(job_id).terminal:
                ending = True  # what was published before the end is queued: send it first
                await asyncio.sleep(0)
        if not ws.closed:
            state = self.driver.state_of(job_id)
            await ws.send_str(jobs_api.log_end_payload(state).decode())
            await ws.close()

    async def _input(self, ws: web.WebSocketResponse, job_id: int, user: str) -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                await self._send(job_id, InputOrder(lease_id="", data=msg.data))
            elif msg.type == WSMsgType.TEXT:
                ctl = _control(msg.data)
                if ctl.get("cancel"):
                    await self.driver.cancel([TaskRef(job_id=job_id)], by=user)
                elif ctl.get("eof"):
                    await self._send(job_id, InputOrder(lease_id="", eof=True))
                elif isinstance(ctl.get("signal"), int) and 0 < ctl["signal"] < 65:
                    await self._send(job_id, InputOrder(lease_id="", signal=ctl["signal"]))
                elif (size := _winsize(ctl.get("winsize"))) is not None:
                    await self._send(job_id, InputOrder(lease_id="", winsize=size))
            else:
                break

    async def _send(self, job_id: int, order: InputOrder) -> None:
        """To every task's rank 0 once the job runs; dropped once it has ended."""
        while True:
            state = self.driver.state_of(job_id)
            if state.terminal:
                return
            if state == JobState.RUNNING:
                leases = live_leases(self.driver, job_id)
                if leases:
                    break
            await self.driver.logs.wait(job_id, 1.0)
        for lease_id, worker_id in leases:
            self.driver.hub.send(
                worker_id,
                dataclasses.replace(order, lease_id=lease_id),
            )


def live_leases(driver: JobDriver, job_id: int) -> list[tuple[str, str]]:
    """(lease id, worker id) of the job's rank-0 runs the scheduler has placed."""
    leases = driver._leases  # the leases sent to workers, by id
    return [
        (lease_id, ins.worker_id)
        for lease_id, ins in list(leases.items())
        if ins.run.job_id == job_id and ins.run.rank == 0
    ]


def _control(text: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _winsize(value: Any) -> tuple[int, int] | None:
    """A `winsize` control's [rows, cols], when both are sizes a terminal has."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    rows, cols = value
    ok = all(type(n) is int and 0 < n <= MAX_WINSIZE for n in (rows, cols))
    return (rows, cols) if ok else None
