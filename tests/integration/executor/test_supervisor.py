"""The run supervisor as a process, through its socket: start, lines, kill, lease, list."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from supervisor_session import run_spec, until

from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import (
    Exited,
    Forget,
    KillRun,
    Lines,
    Message,
    Renew,
    Shutdown,
    Started,
    StartRun,
)


class Events:
    def __init__(self) -> None:
        self.got: list[Message] = []
        self.lost = False

    def exited(self, lease: str) -> Exited | None:
        return next((m for m in self.got if isinstance(m, Exited) and m.lease_id == lease), None)

    def lines(self, lease: str) -> list[tuple[int, str, str]]:
        return [
            (int(r["seq"]), str(r["s"]), str(r["text"]))
            for m in self.got
            if isinstance(m, Lines | Started | Exited) and m.lease_id == lease
            for r in m.records
        ]


def _run(
    main: Callable[[SupervisorClient, Events, Path], Coroutine[Any, Any, None]],
    tmp: Path,
    cgroups: str = "none",
) -> None:
    async def go() -> None:
        events = Events()
        client = SupervisorClient(
            tmp,
            cgroups=cgroups,
            scope=f"test-{uuid.uuid4().hex[:8]}",
            hostname="test-host",
            on_event=events.got.append,
            on_lost=lambda: setattr(events, "lost", True),
        )
        assert await client.connect() is False  # none ran: a fresh one
        try:
            await main(client, events, tmp)
        finally:
            client.send(Shutdown())
            client.close()

    asyncio.run(asyncio.wait_for(go(), 90))


def test_a_run_starts_logs_and_exits(tmp_path: Path) -> None:
    async def main(client: SupervisorClient, events: Events, tmp: Path) -> None:
        client.send(StartRun(spec=run_spec(tmp, "1.1.0", "echo out; echo err >&2; exit 3")))
        await until("the exit", lambda: events.exited("1.1.0"))
        exited = events.exited("1.1.0")
        assert exited is not None and (exited.state, exited.exit_code) == ("FAILED", 3)
        assert any(isinstance(m, Started) and m.lease_id == "1.1.0" for m in events.got)
        lines = events.lines("1.1.0")
        assert [s for _, s, t in lines if t in ("out", "err")] == ["out", "err"]
        assert [q for q, _, _ in lines] == list(range(1, len(lines) + 1))
        # The spool holds exactly what was sent.
        spooled = (tmp / "jobs/1.1.0/log.jsonl").read_text().splitlines()
        assert len(spooled) == len(lines)
        # Kept until forgotten, listed meanwhile (without the lines its event carried).
        runs = (await client.list_runs()).runs
        kept = dataclasses.replace(exited, records=())
        assert [(r.spec.lease_id, r.exited) for r in runs] == [("1.1.0", kept)]
        client.send(Forget(lease_id="1.1.0"))
        assert (await client.list_runs()).runs == ()

    _run(main, tmp_path)


def test_kill_and_a_lapsed_lease_stop_runs(tmp_path: Path) -> None:
    async def main(client: SupervisorClient, events: Events, tmp: Path) -> None:
        trap = 'trap "echo term; exit 1" TERM; echo trapped; sleep 60 & wait'
        client.send(StartRun(spec=run_spec(tmp, "2.1.0", trap)))
        # The kill must find the trap set: wait for the line the script says after it.
        await until("the trap", lambda: "trapped" in [t for _, _, t in events.lines("2.1.0")])
        client.send(KillRun(lease_id="2.1.0", reason="cancel", message="cancelled (scheduler)"))
        await until("the killed run's exit", lambda: events.exited("2.1.0"))
        killed = events.exited("2.1.0")
        assert killed is not None and (killed.state, killed.kill_reason) == ("CANCELLED", "cancel")
        assert "term" in [t for _, _, t in events.lines("2.1.0")]
        # A lease already past: the run is stopped and marked lapsed.
        client.send(Renew(until=time.monotonic() + 0.5, grace_s=0.5))
        client.send(StartRun(spec=run_spec(tmp, "3.1.0", "exec sleep 60")))
        await until("the lapsed run's exit", lambda: events.exited("3.1.0"))
        lapsed = events.exited("3.1.0")
        assert lapsed is not None and lapsed.lapsed and lapsed.signal == 15

    _run(main, tmp_path)


def test_a_spec_asking_for_what_is_not_built_is_refused(tmp_path: Path) -> None:
    async def main(client: SupervisorClient, events: Events, tmp: Path) -> None:
        client.send(StartRun(spec=run_spec(tmp, "4.1.0", "true", uid=1000)))  # the pool's alone
        await until("the refusal", lambda: events.exited("4.1.0"))
        refused = events.exited("4.1.0")
        assert refused is not None and refused.state == "FAILED"
        assert refused.error is not None and "does not support uid" in refused.error

    _run(main, tmp_path)


def _cgroups(pid: int | str) -> list[str]:
    """The groups of each thread of a process (/proc/PID/task/TID/cgroup)."""
    tasks = Path(f"/proc/{pid}/task")
    return sorted({(t / "cgroup").read_text() for t in tasks.iterdir()})


def test_a_job_is_born_in_its_cgroup_and_the_supervisor_stays_in_its_own(tmp_path: Path) -> None:
    own = _cgroups("self")
    assert len(own) == 1  # every thread of this process in one place: the supervisor's too

    async def main(client: SupervisorClient, events: Events, tmp: Path) -> None:
        for n in range(3):  # a fresh group, then kept ones
            lease = f"5.1.{n}"
            spec = run_spec(tmp, lease, "cat /proc/self/cgroup", memory_bytes=64 << 20, cpus=1.0)
            client.send(StartRun(spec=spec))
            await until("the exit", lambda lease=lease: events.exited(lease))  # type: ignore[misc]
            exited = events.exited(lease)
            assert exited is not None and exited.state == "COMPLETED"
            job = [t for _, s, t in events.lines(lease) if s == "out"]
            mine = dict(line.rsplit(":", 1) for line in own[0].splitlines())
            theirs = dict(line.rsplit(":", 1) for line in job)
            if exited.cgroup is not None and not exited.cgroup.startswith("none"):
                moved = {h for h in theirs if theirs[h] != mine[h]}
                # In its own group in each hierarchy its cgroup description names.
                assert moved and all("/rbs/test-" in theirs[h] for h in moved), job
                assert all(theirs[h] in exited.cgroup for h in moved if h != "0:"), job
            assert client.proc is not None
            assert _cgroups(client.proc.pid) == own

    _run(main, tmp_path, cgroups="auto")
