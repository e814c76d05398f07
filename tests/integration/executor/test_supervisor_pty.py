"""A --pty run through the supervisor's socket: a terminal of its own, raw output, its size, ^C."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from supervisor_session import Events, b64, interactive_spec, run_session, until

from rbs.executor.supervisor_client import SupervisorClient
from rbs.executor.supervisor_proto import Input, StartRun


def test_a_terminal_of_its_own_raw_output_window_size_and_ctrl_c(tmp_path: Path) -> None:
    lease = "1.1.0"
    script = (
        'printf "name? "; read x; echo "hi $x"; stty size; tty; echo "sid $(ps -o sid=,tty= -p $$)"; '
        'trap "echo got-int; exit 5" INT; echo ready; while :; do sleep 0.1; done'
    )

    async def body(client: SupervisorClient, ev: Events) -> None:
        client.send(StartRun(spec=interactive_spec(tmp_path, lease, script, pty=True)))
        # A prompt with no newline reaches the daemon as it is written.
        await until("the prompt", lambda: b"name? " in ev.raw(lease))
        assert not any("name?" in t for t in ev.lines(lease))  # the log waits for the line
        client.send(Input(lease_id=lease, winsize=(50, 132)))
        client.send(Input(lease_id=lease, data=b64(b"bob\r")))  # Enter, as a terminal sends it
        await until("ready", lambda: "ready" in ev.lines(lease))
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
        client.send(Input(lease_id=lease, data=b64(b"\x03")))
        await until("the interrupted exit", lambda: ev.exited(lease))
        ended = ev.exited(lease)
        assert ended is not None and ended.exit_code == 5, ended
        assert ev.lines(lease)[-1] == "^Cgot-int"  # the terminal echoes the ^C it took

    run_session(tmp_path, body)


def test_eof_is_the_terminals_end_of_file_character(tmp_path: Path) -> None:
    lease = "2.1.0"

    async def body(client: SupervisorClient, ev: Events) -> None:
        client.send(StartRun(spec=interactive_spec(tmp_path, lease, "cat; echo done", pty=True)))
        await until("the start", lambda: ev.started(lease))
        client.send(Input(lease_id=lease, data=b64(b"one\n"), eof=True))
        await until("the exit", lambda: ev.exited(lease))
        ended = ev.exited(lease)
        assert ended is not None and ended.exit_code == 0
        assert ev.lines(lease)[-1] == "done"
        assert ev.lines(lease).count("one") == 2  # the echo, then cat's copy

    run_session(tmp_path, body)


# The handler writes with os.write: a SIGWINCH that comes while print() is still inside
# stdout's buffer (its line already on the terminal) would make a print() in the
# handler a reentrant call, which Python refuses with a RuntimeError.
WINCH = (
    "import os, signal, sys\n"
    "def show(*_):\n"
    "    cols, rows = os.get_terminal_size(0)\n"
    "    os.write(1, f'redrawn {rows}x{cols}\\n'.encode())\n"
    "signal.signal(signal.SIGWINCH, show)\n"
    "os.write(1, b'drawn\\n')\n"
    "sys.stdin.readline()\n"
)


def test_a_size_said_again_redraws_the_foreground_program(tmp_path: Path) -> None:
    """Each client that attaches says its size first: unchanged, it still gets SIGWINCH."""
    lease = "3.1.0"
    (tmp_path / "winch.py").write_text(WINCH)
    script = f"exec {sys.executable} {tmp_path / 'winch.py'}"

    async def body(client: SupervisorClient, ev: Events) -> None:
        client.send(StartRun(spec=interactive_spec(tmp_path, lease, script, pty=True)))
        await until("the first drawing", lambda: "drawn" in ev.lines(lease))
        client.send(Input(lease_id=lease, winsize=(30, 100)))  # a new size: the kernel's
        await until("the resize", lambda: "redrawn 30x100" in ev.lines(lease) or ev.exited(lease))
        assert not ev.exited(lease), ev.lines(lease)
        client.send(Input(lease_id=lease, winsize=(30, 100)))  # the same: the supervisor's
        await until("the redraw", lambda: ev.lines(lease).count("redrawn 30x100") == 2)
        client.send(Input(lease_id=lease, data=b64(b"\r")))
        await until("the exit", lambda: ev.exited(lease))
        ended = ev.exited(lease)
        assert ended is not None and ended.exit_code == 0, ended

    run_session(tmp_path, body)


def test_secrets_are_masked_in_what_the_terminal_gets(tmp_path: Path) -> None:
    """The raw stream a --pty client sees is masked as the log is, also when the job
    writes a value in pieces."""
    lease = "4.1.0"
    token = "hf_tty-s3cr3t-value"
    script = (
        'printf "token: %s\\n" "$TOKEN"; printf "hf_tty-"; printf "s3cr3t-value\\n"; '
        "printf 'no secret here\\n'; read x"
    )

    async def body(client: SupervisorClient, ev: Events) -> None:
        spec = interactive_spec(tmp_path, lease, script, pty=True)
        client.send(StartRun(spec=dataclasses.replace(spec, secrets={"TOKEN": token})))
        await until("the last line", lambda: b"no secret here" in ev.raw(lease))
        raw = ev.raw(lease)
        assert token.encode() not in raw and b"s3cr3t" not in raw, raw
        assert raw.count(b"***") == 2, raw
        assert "token: ***" in ev.lines(lease)
        client.send(Input(lease_id=lease, data=b64(b"\r")))
        await until("the exit", lambda: ev.exited(lease))

    run_session(tmp_path, body)
