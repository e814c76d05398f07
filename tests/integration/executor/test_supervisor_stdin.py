"""An interactive run through the supervisor's socket: its stdin fed by Input, SIGINT by SignalRun."""

from __future__ import annotations

import signal
from pathlib import Path

from supervisor_session import Events, b64, interactive_spec, run_session, until

from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import Input, SignalRun, StartRun


def test_stdin_round_trip_eof_and_sigint(tmp_path: Path) -> None:
    async def body(client: SupervisorClient, ev: Events) -> None:
        # cat echoes each line, ends at EOF with 0.
        client.send(StartRun(spec=interactive_spec(tmp_path, "1.0.1", "cat; echo done")))
        await until("the start", lambda: ev.started("1.0.1"))
        client.send(Input(lease_id="1.0.1", data=b64(b"hello\nworld\n")))
        await until("the echo", lambda: ev.lines("1.0.1")[-2:] == ["hello", "world"])
        client.send(Input(lease_id="1.0.1", data=b64(b"last\n"), eof=True))
        await until("the exit", lambda: ev.exited("1.0.1"))
        ended = ev.exited("1.0.1")
        assert ended is not None and ended.exit_code == 0
        assert ev.lines("1.0.1") == ["hello", "world", "last", "done"]
        # SIGINT reaches the job's trap; it keeps running until it chooses to end.
        trap = 'trap "echo got-int; exit 7" INT; echo ready; while :; do sleep 0.1; done'
        client.send(StartRun(spec=interactive_spec(tmp_path, "2.0.1", trap)))
        await until("ready", lambda: "ready" in ev.lines("2.0.1"))
        client.send(SignalRun(lease_id="2.0.1", signal=int(signal.SIGINT)))
        await until("the interrupted exit", lambda: ev.exited("2.0.1"))
        ended = ev.exited("2.0.1")
        assert ended is not None and ended.exit_code == 7
        assert "got-int" in ev.lines("2.0.1")

    run_session(tmp_path, body)
