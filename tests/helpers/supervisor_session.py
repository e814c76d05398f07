"""A supervisor session for the run supervisor's integration tests: start it over its
socket, drive runs, and stop it with every run it still holds (no supervisor outlives a
test, even one that failed)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import (
    Exited,
    KillRun,
    Lines,
    Message,
    Output,
    RunSpec,
    Shutdown,
    Started,
)


def run_spec(tmp: Path, lease: str, script: str, **kw: Any) -> RunSpec:
    """A run of `sh -c SCRIPT` in its own folder under TMP (`kw`: other RunSpec fields)."""
    run = tmp / "jobs" / lease
    (run / "work").mkdir(parents=True)
    return RunSpec(
        lease_id=lease,
        argv=("sh", "-c", script),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(run / "work"),
        spool=str(run / "log.jsonl"),
        key=lease,
        grace_s=kw.pop("grace_s", 5.0),
        **kw,
    )


def interactive_spec(tmp: Path, lease: str, script: str, *, pty: bool = False) -> RunSpec:
    """A run of `sh -c SCRIPT` with its stdin open (and a terminal with pty), under TMP."""
    return run_spec(tmp, lease, script, stdin=True, pty=pty)


async def until(what: str, check: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Events:
    """What the supervisor said, with lookups by lease."""

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
            if isinstance(m, Lines | Started | Exited) and m.lease_id == lease
            for r in m.records
            if r["s"] == stream
        ]


def run_session(
    tmp_path: Path, body: Callable[[SupervisorClient, Events], Awaitable[None]]
) -> None:
    """Start a supervisor under TMP_PATH, run BODY against it, then stop it and its runs."""
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
            await until("the runs' exits", lambda: all(events.exited(x) for x in alive), 30)
            client.send(Shutdown())
            client.close()

    asyncio.run(asyncio.wait_for(go(), 120))
