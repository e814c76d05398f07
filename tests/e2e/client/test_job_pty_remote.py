"""`-i --pty` and `rbs job attach` against `rbs remote serve` with two `rbs remote worker`s.

The first worker is drained, so every job runs on the second: the terminal's bytes go
client -> server -> a worker that is not the first -> its run supervisor, and back. As
root (with setpriv) the second worker has a uid pool (--run-uids): the job's terminal
is then its run's own, as a login's is. A reattach redraws the screen: the program in
the foreground gets SIGWINCH although the size did not change. `-i` without a terminal
takes piped stdin through the same server and worker.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jobs_harness import spawn_rbs, spawn_worker, stop_process, wait_ready
from tmux_term import TMUX, Tmux

pytestmark = pytest.mark.timeout(420)
RBS = f"{shlex.quote(sys.executable)} -m rbs"
UIDS = os.geteuid() == 0 and shutil.which("setpriv") is not None  # w2 gets a uid pool
# Prints the window size on each SIGWINCH (a full-screen program redraws then), with
# os.write: a print() in the handler, coming while another print() is inside stdout's
# buffer, is a reentrant call that Python refuses.
WINCH = (
    "/usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGWINCH, "
    'lambda *_: os.write(1, ("redrawn %d %d\\n" % tuple(os.get_terminal_size(0))).encode())); '
    'os.write(1, b"drawn\\n"); sys.stdin.readline()\''
)


@dataclass
class Fleet:
    address: str
    workers: list[str]  # worker ids: w1 (drained), w2
    root: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RBS_REMOTE")}
        return env | {"RBS_HOME": str(self.root / "home")}  # no local cluster

    def rbs(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rbs", *args[:2], "--server", self.address, *args[2:]],
            env=self.env(),
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def workers_of(self, job: str) -> list[str]:
        r = self.rbs("job", "show", job, "--json")
        assert r.returncode == 0, r.stderr
        workers: list[str] = json.loads(r.stdout)["workers"]
        return workers


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    # Outside /tmp (runs with uids of their own get a /tmp of their own), o+x on the way.
    root = Path(tempfile.mkdtemp(prefix="rbs-pty-remote-", dir="/var/tmp"))
    root.chmod(0o711)
    log, ready = root / "server.log", root / "server.ready"
    args = ["remote", "serve", "--port", "0", "--data-dir", str(root / "data")]
    server = spawn_rbs([*args, "--ready-file", str(ready)], log)
    procs = [server]
    try:
        address = f"127.0.0.1:{wait_ready(server, ready, log)['port']}"
        w1, w1_ready, w1_log = spawn_worker(address, root, "w1")
        procs.append(w1)
        ids = [str(wait_ready(w1, w1_ready, w1_log)["worker_id"])]
        w2_ready, w2_log = root / "w2.ready", root / "w2.log"
        w2_args = ["remote", "worker", "--server", address, "--work-dir", str(root / "w2"),
                   "--name", "w2", "--job-slots", "2", "--ready-file", str(w2_ready)]  # fmt: skip
        if UIDS:
            w2_args += ["--run-uids", "200000-265535"]
        w2 = spawn_rbs(w2_args, w2_log)
        procs.append(w2)
        ids.append(str(wait_ready(w2, w2_ready, w2_log)["worker_id"]))
        fleet = Fleet(address, ids, root)
        r = fleet.rbs("remote", "drain", ids[0], "--reason", "keep w1 idle")
        assert r.returncode == 0, r.stderr
        yield fleet
    finally:
        for p in reversed(procs):
            stop_process(p)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (make system-deps)")
def test_pty_through_the_second_worker_and_a_redraw_on_reattach(
    fleet: Fleet, tmp_path: Path
) -> None:
    tmux = Tmux(tmp_path / "tmux.sock", fleet.env() | {"TERM": "xterm", "PS1": "outer$ "})
    tmux.start(cols=100, rows=30)
    server = fleet.address
    try:
        tmux.type(f"{RBS} job submit --server {server} -i --pty -- bash --norc --noprofile; "
                  "echo client-exit=$?")  # fmt: skip
        job = tmux.wait_for(r"^rbs: job (\d+)$").group(1)
        tmux.type("stty size; echo size-$((1+1))")
        tmux.wait_for(r"^30 100\nsize-2$")
        assert fleet.workers_of(job) == [fleet.workers[1]]  # the second worker runs it

        # Its terminal is the run's own: it opens it as /dev/tty and by name.
        tmux.type('echo "owner $(stat -c %u $(tty)) mode $(stat -c %a $(tty)) uid $(id -u)"')
        owner, mode, uid = tmux.wait_for(r"^owner (\d+) mode (\d+) uid (\d+)$").groups()
        assert owner == uid
        if UIDS:
            assert 200000 <= int(uid) <= 265535 and mode == "620"
        tmux.type('echo via-dev-tty >/dev/tty; echo "by-name-$((2+2))" >"$(tty)"')
        tmux.wait_for(r"^via-dev-tty$")
        tmux.wait_for(r"^by-name-4$")

        # A full-screen-ish program in the foreground; detach, reattach: it redraws.
        tmux.type(WINCH)
        tmux.wait_for(r"^drawn$")
        assert "\nredrawn" not in tmux.screen()
        tmux.type("~.", enter=False)  # at a line's start: the last key was Enter
        tmux.wait_for(rf"rbs: detached from job {job}; .*Reattach with: rbs job attach {job}")
        tmux.wait_for(r"^client-exit=0$")
        tmux.type(f"{RBS} job attach --server {server} {job}; echo attach-exit=$?")
        tmux.wait_for(r"^redrawn 100 30$")  # the same size: SIGWINCH all the same
        tmux.type("")  # Enter: the program reads its line and ends
        tmux.type("echo back-$((2+3))")
        tmux.wait_for(r"^back-5$")
        tmux.type("exit 4")
        tmux.wait_for(r"^attach-exit=4$")  # the job's exit code, through w2 and the server
    finally:
        tmux.kill()

    r = fleet.rbs("job", "logs", job)  # the log has the session as lines
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "back-5" in lines and "redrawn 100 30" in lines and "via-dev-tty" in lines


def test_interactive_stdin_from_a_pipe_through_the_second_worker(fleet: Fleet) -> None:
    r = fleet.rbs("job", "submit", "-i", "--", "sh", "-c", "tr a-z A-Z; exit 3", stdin="one\ntwo\n")
    assert (r.returncode, r.stdout) == (3, "ONE\nTWO\n"), r.stderr
    job = r.stderr.split("rbs: job ")[1].split()[0] if "rbs: job " in r.stderr else None
    assert job is not None, r.stderr
    assert fleet.workers_of(job) == [fleet.workers[1]]
