"""The embedded local cluster survives its server dying, and never signals a process not its own."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

pytestmark = pytest.mark.chaos

LINES = 30  # one every 0.2 s: the job runs about 6 s


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
    env["RBS_HOME"] = str(home)
    return env


def rbs(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        env=_env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def popen(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rbs", *args],
        env=_env(home),
        cwd=home,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "rbs-home"
    home.mkdir()
    try:
        yield home
    finally:
        # Always stop the local cluster, also when a test failed.
        r = rbs(home, "remote", "down", timeout=60)
        assert r.returncode == 0, r.stderr


def _cluster(home: Path) -> dict[str, int]:
    data: dict[str, int] = json.loads((home / "local" / "cluster.json").read_text())
    return data


def _gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie counts: nothing reaps the cluster's orphans here)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True


class Lines:
    """A pipe read by a thread, so the test can wait for a line with a deadline."""

    def __init__(self, pipe: IO[str]) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._t = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._t.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line {text!r} in {timeout} s; saw {self.seen}")
            try:
                line = self._q.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"the stream ended before {text!r}; saw {self.seen}")
            self.seen.append(line)

    def rest(self, timeout: float) -> list[str]:
        self._t.join(timeout)
        assert not self._t.is_alive(), "the stream did not end"
        while (line := self._q.get_nowait()) is not None:
            self.seen.append(line)
        return self.seen


def test_a_killed_server_is_restarted_on_its_port_and_the_job_carries_on(home: Path) -> None:
    script = f'for i in $(seq 1 {LINES}); do echo "n $i"; sleep 0.2; done; echo ok > out.txt'
    r = rbs(home, "job", "submit", "--outputs", "out.txt", "--", "sh", "-c", script)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    before = _cluster(home)
    procs: list[subprocess.Popen[str]] = []
    try:
        follow = popen(home, "job", "logs", "-f", job)
        procs.append(follow)
        assert follow.stdout is not None
        out = Lines(follow.stdout)
        out.wait_for("n 2", timeout=60)  # running, and followed
        waiter = popen(home, "job", "wait", job)
        procs.append(waiter)

        os.kill(before["server_pid"], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not _gone(before["server_pid"]):
            assert time.monotonic() < deadline, "the server did not die"
            time.sleep(0.01)

        r = rbs(home, "job", "list")
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        after = _cluster(home)
        assert after["server_pid"] != before["server_pid"]
        assert (after["grpc_port"], after["http_port"]) == (
            before["grpc_port"],
            before["http_port"],
        )
        assert after["worker_pid"] == before["worker_pid"]  # the worker carried on

        lines = out.rest(timeout=90)
        follow_rc = follow.wait(timeout=30)
        follow_err = follow.stderr.read() if follow.stderr else ""
        assert follow_rc == 0, follow_err
        wait_out, wait_err = waiter.communicate(timeout=90)
        assert (waiter.returncode, wait_out.split()) == (0, [job, "COMPLETED"]), wait_err
        for err in (follow_err, wait_err):
            assert "Traceback" not in err, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate(timeout=30)

    numbered = [x for x in lines if x.startswith("n ")]
    assert numbered == [f"n {i}" for i in range(1, LINES + 1)]  # each once, in order
    assert "[rbs] ended COMPLETED" in " ".join(lines)

    info = json.loads(rbs(home, "job", "show", job, "--json").stdout)
    assert (info["state"], info["attempts"], info["exit_code"]) == ("COMPLETED", 1, 0)
    full = rbs(home, "job", "logs", job).stdout.splitlines()
    assert [x for x in full if x.startswith("n ")] == numbered
    assert sum("attempt" in x and x.startswith("[rbs] job") for x in full) == 1  # ran once
    dest = home / "dl"
    r = rbs(home, "job", "outputs", job, "--dest", str(dest))
    assert r.returncode == 0, r.stderr
    assert (dest / "out.txt").read_text() == "ok\n"


def _record(home: Path, pid: int) -> None:
    root = home / "local"
    root.mkdir(parents=True, exist_ok=True)
    state = {"host": "127.0.0.1", "grpc_port": 9, "http_port": 10}
    (root / "cluster.json").write_text(json.dumps({**state, "server_pid": pid, "worker_pid": pid}))


def test_recorded_pids_of_other_processes_are_never_signalled(home: Path) -> None:
    # As after a reboot: the pids in cluster.json now belong to something else.
    other = subprocess.Popen(["sleep", "60"])
    try:
        _record(home, other.pid)
        r = rbs(home, "remote", "down", timeout=60)
        assert r.returncode == 0, r.stderr
        assert "no local cluster is running" in r.stdout
        assert other.poll() is None, "rbs remote down signalled a process that is not rbs"

        _record(home, other.pid)
        r = rbs(home, "job", "list")
        assert r.returncode == 0, r.stderr
        assert "started a local cluster" in r.stderr  # the recorded one is not running
        assert other.poll() is None, "rbs signalled a process that is not rbs"
        assert _cluster(home)["server_pid"] != other.pid
    finally:
        other.kill()
        other.wait(timeout=30)


def _squat(port: int) -> socket.socket:
    """A socket bound to the port of a server just killed.

    The kernel may hold the dead server's connections on that port for a moment after
    the process is gone (closing, not yet TIME_WAIT), so the bind is retried, bounded.
    """
    deadline = time.monotonic() + 30
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return s
        except OSError:
            s.close()
            assert time.monotonic() < deadline, f"port {port} stayed busy after the server died"
            time.sleep(0.05)


def test_a_taken_port_moves_the_server_and_restarts_the_worker(home: Path) -> None:
    r = rbs(home, "job", "submit", "--", "sh", "-c", "echo go; sleep 3; echo done")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    before = _cluster(home)
    follow = popen(home, "job", "logs", "-f", job)
    try:
        assert follow.stdout is not None
        Lines(follow.stdout).wait_for("go", timeout=60)  # running on the worker
    finally:
        follow.kill()
        follow.communicate(timeout=30)
    os.kill(before["server_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while not _gone(before["server_pid"]):
        assert time.monotonic() < deadline, "the server did not die"
        time.sleep(0.01)
    # Something else listens on the server's port now.
    with _squat(before["grpc_port"]) as squatter:
        squatter.listen()
        r = rbs(home, "job", "list")
        assert r.returncode == 0, r.stderr
        assert f"port {before['grpc_port']}" in r.stderr and "taken" in r.stderr, r.stderr
        assert "restarted the worker" in r.stderr
        after = _cluster(home)
        assert after["grpc_port"] != before["grpc_port"]
        assert after["worker_pid"] != before["worker_pid"]
        assert _gone(before["worker_pid"])
    # The old worker's run is requeued once the server gives it up: nothing is lost.
    r = rbs(home, "job", "wait", job, "--timeout", "100")
    assert (r.returncode, r.stdout.split()) == (0, [job, "COMPLETED"]), r.stderr
    info = json.loads(rbs(home, "job", "show", job, "--json").stdout)
    assert (info["state"], info["attempts"]) == ("COMPLETED", 2)
