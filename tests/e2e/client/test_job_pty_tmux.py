"""`rbs job submit -i --pty -- bash` in a real terminal (tmux), against the embedded cluster.

As a user at a terminal: the job's bash has a tty, the window size follows the
terminal's, Ctrl-C interrupts what bash runs (bash lives on), `~.` detaches, `rbs job
attach` reattaches, and the job's exit code is the client's.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster
from tmux_term import TMUX, Tmux

CLUSTER = EmbeddedCluster()
RBS = f"{shlex.quote(sys.executable)} -m rbs"
SLEEP = "4321"  # the `sleep` the test interrupts, told apart from any other by its argument


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


def _sleep_running() -> bool:
    """Whether the job's `sleep SLEEP` is running (the worker is on this machine)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[:2] == [b"sleep", SLEEP.encode()]:
                return True
    return False


def _client_pid(job: str) -> int:
    """The pid of the `rbs job attach JOB` running in the terminal."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd[1:5] == [b"-m", b"rbs", b"job", b"attach"] and cmd[5:6] == [job.encode()]:
                return int(pid)
    raise AssertionError(f"no rbs job attach {job} is running")


def _until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)")
def test_pty_bash_in_tmux(home: Path, tmp_path: Path) -> None:
    env = CLUSTER.env(home) | {"TERM": "xterm", "PS1": "outer$ "}
    tmux = Tmux(tmp_path / "tmux.sock", env)
    tmux("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", "bash --norc --noprofile")
    try:
        tmux.type(f"cd {shlex.quote(str(home))}")
        tmux.type(f"{RBS} job submit -i --pty -- bash --norc --noprofile; echo client-exit=$?")
        job = tmux.wait_for(r"^rbs: job (\d+)$").group(1)

        # A terminal of its own, and what is typed runs there.
        tmux.type("tty; echo $((6*7))")
        tmux.wait_for(r"^/dev/pts/\d+$")
        tmux.wait_for(r"^42$")

        # The window size follows the terminal's (resized by tmux: SIGWINCH to the client).
        tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
        size = ""
        for i in range(100):  # the new size travels to the worker: ask until it is there
            tmux.type(f"stty size; echo asked-{i}")
            tmux.wait_for(rf"^asked-{i}$")
            lines = tmux.screen().splitlines()
            size = lines[len(lines) - 1 - lines[::-1].index(f"asked-{i}") - 1]
            if size == "40 120":
                break
        assert size == "40 120"

        # Ctrl-C belongs to the job: it interrupts the sleep; bash carries on.
        tmux.type(f"sleep {SLEEP}")
        _until("the sleep to run", _sleep_running)
        tmux("send-keys", "-t", "t", "C-c")
        _until("the sleep to end", lambda: not _sleep_running())
        tmux.type("echo alive-$((1+1))")
        tmux.wait_for(r"^alive-2$")
        assert not re.search(r"^client-exit=", tmux.screen(), re.M)  # the client took no ^C

        # `~.` at the start of a line detaches; the job goes on and attach comes back to it.
        tmux("send-keys", "-t", "t", "Enter")
        tmux.type("~.", enter=False)
        tmux.wait_for(rf"rbs: detached from job {job}; .*Reattach with: rbs job attach {job}")
        tmux.wait_for(r"^client-exit=0$")
        tmux.type("stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon; echo mode-1")
        tmux.wait_for(r"^icanon\nmode-1$")  # raw mode is over: the terminal is as it was
        tmux.type(f"{RBS} job attach {job}; echo attach-exit=$?")
        tmux.type("echo back-$((2+3))")
        tmux.wait_for(r"^back-5$")

        # SIGTERM to the client detaches it, and its terminal is restored too.
        os.kill(_client_pid(job), signal.SIGTERM)
        tmux.wait_for(r"^attach-exit=0$")
        tmux.type("stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e -icanon; echo mode-2")
        tmux.wait_for(r"^icanon\nmode-2$")
        tmux.type(f"{RBS} job attach {job}; echo attach-exit=$?")
        tmux.type("echo again-$((3+4))")
        tmux.wait_for(r"^again-7$")

        # The job's exit code is the client's.
        tmux.type("exit 3")
        tmux.wait_for(r"^attach-exit=3$")
    finally:
        subprocess.run([*tmux.base, "kill-server"], env=env, capture_output=True, timeout=30)

    r = CLUSTER.rbs(home, "job", "logs", job)  # the log has the session as lines
    assert r.returncode == 0, r.stderr
    assert "alive-2" in r.stdout.splitlines() and "back-5" in r.stdout.splitlines()


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)")
def test_tilde_c_cancels_the_job(home: Path, tmp_path: Path) -> None:
    env = CLUSTER.env(home) | {"TERM": "xterm", "PS1": "outer$ "}
    tmux = Tmux(tmp_path / "tmux.sock", env)
    tmux("new-session", "-d", "-s", "t", "-x", "100", "-y", "30", "bash --norc --noprofile")
    try:
        tmux.type(f"cd {shlex.quote(str(home))}")
        tmux.type(f"{RBS} job submit -i --pty -- bash --norc --noprofile; echo client-exit=$?")
        job = tmux.wait_for(r"^rbs: job (\d+)$").group(1)
        tmux.type("echo up-$((4+4))")
        tmux.wait_for(r"^up-8$")
        tmux.type("~C", enter=False)  # at the start of a line: the last key was Enter
        tmux.wait_for(rf"rbs: cancelling job {job}")
        tmux.wait_for(r"^client-exit=122$")  # CANCELLED (README: Exit codes)
    finally:
        subprocess.run([*tmux.base, "kill-server"], env=env, capture_output=True, timeout=30)
    r = CLUSTER.rbs(home, "job", "show", job)
    assert "CANCELLED" in r.stdout, r.stdout


def test_pty_without_a_terminal_is_refused_naming_the_flag(home: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rbs", "job", "submit", "-i", "--pty", "--", "bash"],
        env=CLUSTER.env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert "--pty needs a terminal on stdin" in r.stderr and "-i alone" in r.stderr
    assert "Traceback" not in r.stderr
    assert "started a local cluster" not in r.stderr  # refused before anything is submitted

    r = CLUSTER.rbs(home, "job", "submit", "--pty", "--", "bash")
    assert r.returncode != 0 and "--pty needs --interactive (-i)" in r.stderr, r.stderr

    # -i alone still takes piped stdin.
    r = subprocess.run(
        [sys.executable, "-m", "rbs", "job", "submit", "-i", "--", "cat"],
        env=CLUSTER.env(home),
        input="piped\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (r.returncode, r.stdout) == (0, "piped\n"), r.stderr
