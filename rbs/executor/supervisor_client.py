"""The daemon's end of the run supervisor's socket: find or start the supervisor, then talk.

`connect()` tries `<work-dir>/supervisor.sock` first: a supervisor that outlived the
previous daemon answers, and the daemon re-attaches to its runs (`list_runs`). With
no socket, or a dead one, it starts a fresh supervisor in its own session, waits for
its "ready" line, and connects. Events arrive on the event loop through `on_event`; a
supervisor that goes away unasked is reported through `on_lost`. A frame nobody waits
for (a Forget) goes with the next frame, or within LATER_S (`send_later`): one write
and one wake-up of the supervisor for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rbs.executor.supervisor_proto import (
    SOCKET_NAME,
    FrameReader,
    ListRuns,
    Message,
    ProtocolError,
    Runs,
    decode,
    encode,
    socket_address,
)

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0  # a fresh interpreter on a loaded host
LATER_S = 0.5  # the longest a `send_later` frame waits for company


class SupervisorError(Exception):
    """The run supervisor could not be started or reached; the message says why."""


class SupervisorClient(asyncio.Protocol):
    """One connection to the supervisor; see the module docstring."""

    def __init__(
        self,
        work_dir: Path,
        *,
        cgroups: str,
        scope: str,
        hostname: str,
        on_event: Callable[[Message], None],
        on_lost: Callable[[], None],
    ) -> None:
        self.work_dir = work_dir
        self._args = [cgroups, scope, hostname]
        self._on_event = on_event
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader()
        self._runs: asyncio.Future[Runs] | None = None
        self._closing = False
        self.proc: subprocess.Popen[bytes] | None = None
        # Frames that may wait (`send_later`): they go with the next `send`, or after
        # LATER_S, so a short job's Forget rides in the next job's StartRun write.
        self._later: list[bytes] = []
        self._later_timer: asyncio.TimerHandle | None = None

    @property
    def connected(self) -> bool:
        return self._transport is not None

    async def connect(self) -> bool:
        """True: re-attached to a running supervisor; False: started a fresh one."""
        self._closing = False
        try:
            await self._open()
            return True
        except OSError:
            pass
        await self._spawn()
        await self._open()
        return False

    async def _open(self) -> None:
        path, dir_fd = socket_address(self.work_dir)
        try:
            await asyncio.get_running_loop().create_unix_connection(lambda: self, path)
        finally:
            if dir_fd is not None:
                os.close(dir_fd)

    async def _spawn(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log_file = os.open(
            self.work_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        with open(log_file, "ab") as err:
            proc = self.proc = subprocess.Popen(
                [sys.executable, "-m", "rbs.executor.supervisor", str(self.work_dir), *self._args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,  # outlives the daemon; a ^C to it is not for it
                close_fds=True,
                env={k: v for k, v in os.environ.items() if "TOKEN" not in k},  # needs none
            )
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), READY_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            line = b""
        finally:
            proc.stdout.close()
        if line.strip() != b"ready":
            code = proc.wait()
            tail = _tail(self.work_dir / "supervisor.log")
            raise SupervisorError(
                f"the run supervisor did not start (exit code {code}) in {self.work_dir}; "
                f"supervisor.log ends: {tail}"
            )
        log.info("started the run supervisor (pid %d)", proc.pid)

    async def list_runs(self, timeout: float = 30.0) -> Runs:
        self._runs = asyncio.get_running_loop().create_future()
        self.send(ListRuns())
        try:
            return await asyncio.wait_for(self._runs, timeout)
        except TimeoutError:
            raise SupervisorError(
                f"the run supervisor at {self.work_dir / SOCKET_NAME} did not list its runs "
                f"within {timeout:g}s"
            ) from None

    def send(self, msg: Message) -> None:
        if self._transport is None:
            raise SupervisorError("not connected to the run supervisor")
        frame = encode(msg)
        if self._later:
            frame = b"".join((*self._later, frame))
            self._drop_later()
        self._transport.write(frame)

    def send_later(self, msg: Message) -> None:
        """Send a frame nobody waits for (a Forget) with the next `send`, or within
        LATER_S; in order with every other frame. Lost with the connection."""
        if self._transport is None:
            raise SupervisorError("not connected to the run supervisor")
        self._later.append(encode(msg))
        if self._later_timer is None:
            self._later_timer = asyncio.get_running_loop().call_later(LATER_S, self.flush)

    def flush(self) -> None:
        """Write the frames `send_later` holds now."""
        if self._later and self._transport is not None:
            self._transport.write(b"".join(self._later))
        self._drop_later()

    def _drop_later(self) -> None:
        self._later = []
        if self._later_timer is not None:
            self._later_timer.cancel()
            self._later_timer = None

    def close(self) -> None:
        self._closing = True
        self.flush()
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.poll()  # reaped if it has exited; else it lives on

    # ---- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._reader = FrameReader()

    def data_received(self, data: bytes) -> None:
        try:
            bodies = self._reader.feed(data)
            for body in bodies:
                msg = decode(body)
                if isinstance(msg, Runs) and self._runs is not None and not self._runs.done():
                    self._runs.set_result(msg)
                else:
                    self._on_event(msg)
        except ProtocolError as e:
            log.error("the run supervisor sent a bad frame: %s", e)
            if self._transport is not None:
                self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._drop_later()
        if not self._closing:
            log.error("lost the connection to the run supervisor: %s", exc or "it closed it")
            self._on_lost()


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-1000:].strip() or "(empty)"
    except OSError as e:
        return f"(unreadable: {e})"
