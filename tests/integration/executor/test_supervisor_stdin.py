"""An interactive run through the supervisor's socket: its stdin fed by Input, SIGINT by SignalRun."""

from __future__ import annotations

import asyncio
import base64
import signal
import time
from collections.abc import Callable
from pathlib import Path

from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import (
    Exited,
    Input,
    Lines,
    Message,
    RunSpec,
    Shutdown,
    SignalRun,
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
    )


async def _until(what: str, check: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_stdin_round_trip_eof_and_sigint(tmp_path: Path) -> None:
    got: list[Message] = []

    def exited(lease: str) -> Exited | None:
        return next((m for m in got if isinstance(m, Exited) and m.lease_id == lease), None)

    def texts(lease: str) -> list[str]:
        return [
            str(r["text"])
            for m in got
            if isinstance(m, Lines) and m.lease_id == lease
            for r in m.records
            if r["s"] == "out"
        ]

    async def go() -> None:
        client = SupervisorClient(
            tmp_path,
            cgroups="none",
            scope="test",
            hostname="h",
            on_event=got.append,
            on_lost=lambda: None,
        )
        await client.connect()
        try:
            # cat echoes each line, ends at EOF with 0.
            client.send(StartRun(spec=_spec(tmp_path, "1.0.1", "cat; echo done")))
            await _until("the start", lambda: any(isinstance(m, Started) for m in got))
            client.send(Input(lease_id="1.0.1", data=_b64(b"hello\nworld\n")))
            await _until("the echo", lambda: texts("1.0.1")[-2:] == ["hello", "world"])
            client.send(Input(lease_id="1.0.1", data=_b64(b"last\n"), eof=True))
            await _until("the exit", lambda: exited("1.0.1"))
            ended = exited("1.0.1")
            assert ended is not None and ended.exit_code == 0
            assert texts("1.0.1") == ["hello", "world", "last", "done"]
            # SIGINT reaches the job's trap; it keeps running until it chooses to end.
            trap = 'trap "echo got-int; exit 7" INT; echo ready; while :; do sleep 0.1; done'
            client.send(StartRun(spec=_spec(tmp_path, "2.0.1", trap)))
            await _until("ready", lambda: "ready" in texts("2.0.1"))
            client.send(SignalRun(lease_id="2.0.1", signal=int(signal.SIGINT)))
            await _until("the interrupted exit", lambda: exited("2.0.1"))
            ended = exited("2.0.1")
            assert ended is not None and ended.exit_code == 7
            assert "got-int" in texts("2.0.1")
        finally:
            client.send(Shutdown())
            client.close()

    asyncio.run(asyncio.wait_for(go(), 120))
