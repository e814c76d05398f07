"""The terminal side of an interactive job: `rbs job submit -i` and `rbs job attach ID`.

One websocket to the server's GET /v1/jobs/{id}/attach (rbs.server.job_attach;
docs/design/interactive.md): this process's stdin goes to the job's stdin (a thread
reads it, so a terminal, a pipe and a file all work), the job's stdout and stderr
lines come back to ours. EOF on stdin (Ctrl-D on a terminal) closes the job's stdin.
Ctrl-C sends the job SIGINT; a second Ctrl-C within `CANCEL_WINDOW_S` cancels it. When
this process goes away the job keeps running, and `rbs job attach ID` reattaches.

Imported only for -i and attach: aiohttp is not on the plain submit's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

import aiohttp

from rbs.cli.job_follow import exit_status, state_text
from rbs.client.errors import JobError
from rbs.client.http import login_name
from rbs.wire import jobs_api

if TYPE_CHECKING:
    from rbs.client.jobs import JobsClient

CANCEL_WINDOW_S = 1.0  # a second Ctrl-C this soon after the first cancels the job
READ_CHUNK = 64 * 1024
DETACHED = 0  # `~.` or a lost connection: the job goes on (its status is not known)


class Terminal:
    """One attachment: pumps stdin to the socket and the socket's lines to stdout/stderr."""

    def __init__(self, client: JobsClient, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.last_int = 0.0
        self.ended: str | None = None  # the job's final state, from the end marker

    async def run(self, after: str) -> None:
        self.loop = asyncio.get_running_loop()
        conn = self.client.conn
        scheme = "https" if conn.tls is not None else "http"
        url = f"{scheme}://{conn.host}:{conn.port}/v1/jobs/{self.job_id}/attach?after={after}"
        headers = {"X-Rbs-User": login_name()}
        if conn.token:
            headers["Authorization"] = f"Bearer {conn.token}"
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            try:
                ws = await session.ws_connect(
                    url, headers=headers, ssl=conn.tls or True, heartbeat=20.0
                )
            except aiohttp.WSServerHandshakeError as e:
                why = _REFUSALS.get(e.status, f"the server answered HTTP {e.status}")
                raise JobError(f"cannot attach to job {self.job_id}: {why}") from None
            except aiohttp.ClientError as e:
                raise JobError(f"cannot reach {conn.name} to attach: {e}") from None
            self.ws = ws
            self.loop.add_signal_handler(signal.SIGINT, self._interrupt)
            try:
                threading.Thread(target=self._read_stdin, daemon=True).start()
                await self._output(ws)
            finally:
                self.loop.remove_signal_handler(signal.SIGINT)
                await ws.close()

    async def _output(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            for raw in msg.data.splitlines():
                if not raw.strip():
                    continue
                doc = json.loads(raw)
                line = jobs_api.log_line(doc)
                if line is None:
                    self.ended = str(doc.get("state", ""))
                elif line.stream.value != "sys":  # the job's output alone, as srun shows
                    out = sys.stderr if line.stream.value == "err" else sys.stdout
                    out.write(line.text + "\n")
                    out.flush()

    def _send(self, data: bytes | dict[str, Any]) -> None:
        """From any thread: queue a frame on the socket."""
        loop, ws = self.loop, self.ws
        if loop is None or ws is None or ws.closed:
            return
        coro = ws.send_bytes(data) if isinstance(data, bytes) else ws.send_str(json.dumps(data))
        with contextlib.suppress(RuntimeError):  # the loop has ended
            asyncio.run_coroutine_threadsafe(coro, loop)

    def _read_stdin(self) -> None:
        while True:
            try:
                data = os.read(0, READ_CHUNK)
            except OSError:
                data = b""
            if not data:
                self._send({"eof": True})
                return
            self._send(data)

    def _interrupt(self) -> None:
        now = time.monotonic()
        if now - self.last_int <= CANCEL_WINDOW_S:
            print(f"\nrbs: cancelling job {self.job_id}", file=sys.stderr, flush=True)
            self._send({"cancel": True})
        else:
            self._send({"signal": int(signal.SIGINT)})
            print(
                f"\nrbs: sent SIGINT to job {self.job_id}; Ctrl-C again within "
                f"{CANCEL_WINDOW_S:g}s cancels it",
                file=sys.stderr,
                flush=True,
            )
        self.last_int = now


def attach(client: JobsClient, job_id: str, *, after: str = "0") -> int:
    """Attach this terminal to a job until it ends: its exit status (README: Exit codes),
    or 0 when the connection is lost before the end (the job goes on)."""
    term = Terminal(client, job_id)
    asyncio.run(term.run(after))
    if term.ended is None:
        print(
            f"rbs: detached from job {job_id}; it goes on running. "
            f"Reattach with: rbs job attach {job_id}",
            file=sys.stderr,
        )
        return DETACHED
    info = client.wait(job_id)
    if info.state != "COMPLETED":
        print(f"job {job_id}: {state_text(info.state, info.reason)}", file=sys.stderr)
    return exit_status(info)


_REFUSALS = {
    400: "not a job id (want a number like 12)",
    401: "the server wants a token: set RBS_REMOTE_TOKEN (or --token-file)",
    403: "only the job's owner or an admin may attach to it",
    404: "no such job",
}
