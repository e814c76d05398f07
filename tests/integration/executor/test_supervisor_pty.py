"""A --pty run through the supervisor's socket: a terminal of its own, raw output, its size, ^C."""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import (
    Exited,
    Input,
    KillRun,
    Lines,
    Message,
    Output,
    RunSpec,
    Shutdown,
    Started,
    StartRun,
)


def _spec(tmp: Path, lease: str, script: str) -> RunSpec:
    run = tmp / "jobs" / lease
    (run / "work").mkdir(parents=True)
    return RunSpec(
        lease_id=lease,
        argv=("sh", "-c", script),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(run / "work"),
        spool=str(run / "log.jsonl"),
        key=lease,
        grace_s=5.0,
        stdin=True,
        pty=True,
    )


async def _until(what: str, check: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Events:
    def __init__(self) -> None:
        self.got: list[Message] = []

    def exited(self, lease: str) -> Exited | None:
        return next((m for m in self.got if isinstance(m, Exited) and m.lease_id == lease), None)

    def started(self, lease: str) -> Started | None:
        return next((m for m in self.got if isinstance(m, Started) and m.lease_id == lease), None)

    def raw(self, lease: str) -> bytes:
        return b"".join(
            base64.b64decode(m.data)
            for m in self.got
            if isinstance(m, Output) and m.lease_id == lease
        )

    def lines(self, lease: str, stream: str = "out") -> list[str]:
        return [
            str(r["text"])
            for m in self.got
            if isinstance(m, Lines) and m.lease_id == lease
            for r in m.records
            if r["s"] == stream
        ]


def _run(tmp_path: Path, body: Callable[[SupervisorClient, Events], Awaitable[None]]) -> None:
    events = Events()

    async def go() -> None:
        client = SupervisorClient(
            tmp_path,
            cgroups="none",
            scope="test",
            hostname="h",
            on_event=events.got.append,
            on_lost=lambda: None,
        )
        await client.connect()
        try:
            await body(client, events)
        finally:
            # A failed check leaves its run alive, and Shutdown waits for live runs:
            # kill what is still running so that no supervisor outlives the test.
            alive = {m.lease_id for m in events.got if isinstance(m, Started)}
            alive -= {m.lease_id for m in events.got if isinstance(m, Exited)}
            for lease in sorted(alive):
                client.send(KillRun(lease_id=lease, reason="cancel", message="test over"))
            await _until("the runs' exits", lambda: all(events.exited(x) for x in alive), 30)
            client.send(Shutdown())
            client.close()

    asyncio.run(asyncio.wait_for(go(), 120))


def test_a_terminal_of_its_own_raw_output_window_size_and_ctrl_c(tmp_path: Path) -> None:
    lease = "1.1.0"
    script = (
        'printf "name? "; read x; echo "hi $x"; stty size; tty; echo "sid $(ps -o sid=,tty= -p $$)"; '
        'trap "echo got-int; exit 5" INT; echo ready; while :; do sleep 0.1; done'
    )

    async def body(client: SupervisorClient, ev: Events) -> None:
        client.send(StartRun(spec=_spec(tmp_path, lease, script)))
        # A prompt with no newline reaches the daemon as it is written.
        await _until("the prompt", lambda: b"name? " in ev.raw(lease))
        assert not any("name?" in t for t in ev.lines(lease))  # the log waits for the line
        client.send(Input(lease_id=lease, winsize=(50, 132)))
        client.send(Input(lease_id=lease, data=_b64(b"bob\r")))  # Enter, as a terminal sends it
        await _until("ready", lambda: "ready" in ev.lines(lease))
        out = ev.lines(lease)
        assert "name? bob" in out  # the terminal echoed what was typed
        assert "hi bob" in out and "50 132" in out
        assert any(t.startswith("/dev/pts/") for t in out), out
        started = ev.started(lease)
        assert started is not None
        _, sid, tty = next(t.split() for t in out if t.startswith("sid "))
        assert int(sid) == started.pid and tty.startswith("pts/")  # the session leader's tty
        assert not any(t.endswith("\r") for t in out)
        assert b"hi bob\r\n" in ev.raw(lease)  # the raw stream is as the terminal got it
        # Ctrl-C is a byte; the terminal makes it SIGINT for the job's foreground group.
        client.send(Input(lease_id=lease, data=_b64(b"\x03")))
        await _until("the interrupted exit", lambda: ev.exited(lease))
        ended = ev.exited(lease)
        assert ended is not None and ended.exit_code == 5, ended
        assert ev.lines(lease)[-1] == "^Cgot-int"  # the terminal echoes the ^C it took

    _run(tmp_path, body)


def test_eof_is_the_terminals_end_of_file_character(tmp_path: Path) -> None:
    lease = "2.1.0"

    async def body(client: SupervisorClient, ev: Events) -> None:
        client.send(StartRun(spec=_spec(tmp_path, lease, "cat; echo done")))
        await _until("the start", lambda: ev.started(lease))
        client.send(Input(lease_id=lease, data=_b64(b"one\n"), eof=True))
        await _until("the exit", lambda: ev.exited(lease))
        ended = ev.exited(lease)
        assert ended is not None and ended.exit_code == 0
        assert ev.lines(lease)[-1] == "done"
        assert ev.lines(lease).count("one") == 2  # the echo, then cat's copy

    _run(tmp_path, body)


WINCH = (
    "import os, signal, sys\n"
    "def show(*_):\n"
    "    cols, rows = os.get_terminal_size(0)\n"
    "    print(f'redrawn {rows}x{cols}', flush=True)\n"
    "signal.signal(signal.SIGWINCH, show)\n"
    "print('drawn', flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_a_size_said_again_redraws_the_foreground_program(tmp_path: Path) -> None:
    """Each client that attaches says its size first: unchanged, it still gets SIGWINCH."""
    lease = "3.1.0"
    (tmp_path / "winch.py").write_text(WINCH)
    script = f"exec {sys.executable} {tmp_path / 'winch.py'}"

    async def body(client: SupervisorClient, ev: Events) -> None:
        client.send(StartRun(spec=_spec(tmp_path, lease, script)))
        await _until("the first drawing", lambda: "drawn" in ev.lines(lease))
        client.send(Input(lease_id=lease, winsize=(30, 100)))  # a new size: the kernel's
        await _until("the resize", lambda: "redrawn 30x100" in ev.lines(lease))
        client.send(Input(lease_id=lease, winsize=(30, 100)))  # the same: the supervisor's
        await _until("the redraw", lambda: ev.lines(lease).count("redrawn 30x100") == 2)
        client.send(Input(lease_id=lease, data=_b64(b"\r")))
        await _until("the exit", lambda: ev.exited(lease))
        ended = ev.exited(lease)
        assert ended is not None and ended.exit_code == 0, ended

    _run(tmp_path, body)
