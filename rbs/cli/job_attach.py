"""The terminal side of an interactive job: `rbs job submit -i` and `rbs job attach ID`.

One websocket to the server's GET /v1/jobs/{id}/attach (rbs.server.job_attach;
docs/design/interactive.md): this process's stdin goes to the job's stdin (a thread
reads it, so a terminal, a pipe and a file all work), the job's stdout and stderr
lines come back to ours. EOF on stdin (Ctrl-D on a terminal) closes the job's stdin.
Ctrl-C sends the job SIGINT; a second Ctrl-C within `CANCEL_WINDOW_S` cancels it. When
this process goes away the job keeps running, and `rbs job attach ID` reattaches.
With --pty the terminal is the job's (rbs.cli.job_pty): raw mode, its window size
sent on start and on each SIGWINCH, the job's raw output as binary frames, Ctrl-C a
byte for the job, and `~.` / `~C` escapes to detach or cancel.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from rbs.cli.job_follow import exit_status, state_text
from rbs.cli.job_pty import HELP, Action, EscapeParser, raw_mode, window_size, write_all
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

    def __init__(self, client: JobsClient, job_id: str, *, pty: bool = False) -> None:
        self.client = client
        self.job_id = job_id
        self.pty = pty
        self.escapes = EscapeParser()
        self._closing: asyncio.Future[bool] | None = None  # a detach under way
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
            try:
                await (self._terminal(ws) if self.pty else self._lines(ws))
            finally:
                await ws.close()

    async def _lines(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        assert self.loop is not None
        self.loop.add_signal_handler(signal.SIGINT, self._interrupt)
        try:
            threading.Thread(target=self._read_stdin, daemon=True).start()
            await self._output(ws)
        finally:
            self.loop.remove_signal_handler(signal.SIGINT)

    async def _terminal(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """--pty: this terminal raw and the job's, until the job ends or `~.` detaches."""
        assert self.loop is not None
        handlers = {
            signal.SIGWINCH: self._winsize,
            signal.SIGTERM: self._detach,
            signal.SIGHUP: self._detach,
        }
        self._winsize()
        with raw_mode(0):
            try:
                for sig, handler in handlers.items():
                    self.loop.add_signal_handler(sig, handler)
                threading.Thread(target=self._read_stdin, daemon=True).start()
                await self._output(ws)
            finally:
                for sig in handlers:
                    self.loop.remove_signal_handler(sig)

    def _winsize(self) -> None:
        size = window_size(0)
        if size is not None:
            self._send({"winsize": list(size)})

    def _detach(self) -> None:
        if self.ws is not None and self._closing is None:
            self._closing = asyncio.ensure_future(self.ws.close())

    def _escape(self, action: Action) -> None:
        """On the loop: what `~.`, `~C` or `~?` asks."""
        if action is Action.DETACH:
            self._detach()
        elif action is Action.CANCEL:
            write_all(2, f"\r\nrbs: cancelling job {self.job_id}\r\n".encode())
            self._send({"cancel": True})
        else:
            write_all(1, b"\r\n" + HELP.encode())

    async def _output(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:  # a --pty job's terminal output, raw
                write_all(1, msg.data)
                continue
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
            if not data and self.pty:  # the terminal is gone: nothing more can come
                self._on_loop(self._detach)
                return
            if not data:
                self._send({"eof": True})
                return
            if not self.pty:
                self._send(data)
                continue
            for item in self.escapes.feed(data):
                if isinstance(item, bytes):
                    self._send(item)
                else:
                    self._on_loop(self._escape, item)

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        """From the stdin thread: call `fn` on the loop (if it still runs)."""
        if self.loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended
                self.loop.call_soon_threadsafe(fn, *args)

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


def attach(client: JobsClient, job_id: str, *, after: str = "0", pty: bool | None = None) -> int:
    """Attach this terminal to a job until it ends: its exit status (README: Exit codes),
    or 0 when detached (`~.`) or the connection is lost before the end (the job goes on).
    `pty` None: as the job was submitted (asked of the server)."""
    if pty is None:
        manifest: dict[str, Any] = {}
        with contextlib.suppress(JobError):  # a bad id: the attach itself says what is wrong
            manifest = client.show(job_id).raw.get("manifest") or {}
        pty = bool(manifest.get("pty"))
        if pty and not os.isatty(0):
            raise JobError(
                f"job {job_id} runs on a terminal (--pty): attach from a terminal, "
                "not with stdin a pipe or a file"
            )
    term = Terminal(client, job_id, pty=pty)
    asyncio.run(term.run(after))
    if term.ended is None:
        print(
            f"{chr(10) if pty else ''}rbs: detached from job {job_id}; it goes on running. "
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
