"""`rbs job submit -i` end to end: piped stdin round trip, Ctrl-C forwarding and cancel,
detach and `rbs job attach` (client -> server websocket -> worker -> supervisor)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from jobs_harness import JobCluster, wait_for

from rbs.client.jobs import JobsClient

# A job that says it is ready, then waits for SIGINT (exit 7 when it comes).
TRAPS_INT = 'trap "echo got-int; exit 7" INT; echo ready; while :; do sleep 0.1; done'


def _rbs(
    cluster: JobCluster, *args: str, stdin: int | None = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RBS_REMOTE": cluster.address}
    return subprocess.Popen(
        [sys.executable, "-m", "rbs", "job", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def _read_until(
    proc: subprocess.Popen[bytes], want: bytes, timeout: float = 120, *, err: bool = False
) -> bytes:
    """What the process wrote to stdout (stderr), once it holds `want` (bounded in time)."""
    stream = proc.stderr if err else proc.stdout
    assert stream is not None
    got = b""
    deadline = time.monotonic() + timeout
    while want not in got:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {want!r} in the output (got {got!r})")
        ready, _, _ = select.select([stream], [], [], min(left, 1.0))
        if ready:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"stdout ended without {want!r} (got {got!r})")
            got += chunk
    return got


def _job_id(stderr: bytes) -> str:
    for line in stderr.decode().splitlines():
        if line.startswith("rbs: job "):
            return line.split()[-1]
    raise AssertionError(f"no job id in {stderr!r}")


def test_piped_stdin_round_trips_through_cat(cluster: JobCluster) -> None:
    proc = _rbs(cluster, "submit", "-i", "--", "sh", "-c", "cat; echo bye >&2")
    out, err = proc.communicate(b"one\ntwo\nthree\n", timeout=180)
    assert proc.returncode == 0, err.decode()
    assert out == b"one\ntwo\nthree\n"  # the job's stdout alone: no job id, no [rbs] lines
    assert b"bye" in err


def test_exit_code_is_the_jobs(cluster: JobCluster) -> None:
    proc = _rbs(cluster, "submit", "-i", "--", "sh", "-c", "read x; exit $x")
    _, err = proc.communicate(b"5\n", timeout=180)
    assert proc.returncode == 5, err.decode()


def test_ctrl_c_sends_sigint_and_a_second_cancels(cluster: JobCluster) -> None:
    proc = _rbs(cluster, "submit", "-i", "--", "sh", "-c", TRAPS_INT)
    _read_until(proc, b"ready\n")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=100)
    assert b"got-int" in out, err.decode()
    assert proc.returncode == 7
    # A job that ignores SIGINT: the second Ctrl-C, right after the first, cancels it.
    proc = _rbs(cluster, "submit", "-i", "--", "sh", "-c", 'trap "" INT; echo ready; sleep 600')
    _read_until(proc, b"ready\n")
    proc.send_signal(signal.SIGINT)
    # Signals do not queue: the next is sent once the one before is handled. A loaded
    # machine may take over a second for that; then the next Ctrl-C is a first again.
    told = b""
    for sent in range(1, 6):
        while b"cancelling job" not in told and told.count(b"cancels it") < sent:
            told += _read_until(proc, b"\n", err=True)
        if b"cancelling job" in told:
            break
        proc.send_signal(signal.SIGINT)
    assert b"cancelling job" in told, told
    _, err = proc.communicate(timeout=100)
    assert proc.returncode == 122, err.decode()  # CANCELLED (README: Exit codes)


def test_the_job_outlives_its_client_and_attach_reattaches(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    proc = _rbs(
        cluster,
        "submit",
        "-i",
        "--",
        "sh",
        "-c",
        "echo ready; while read l; do echo got $l; done; exit 3",
    )
    _read_until(proc, b"ready\n")
    proc.kill()  # the client goes away, without a word
    proc.wait(60)
    assert proc.stderr is not None
    job = _job_id(proc.stderr.read())
    assert client.show(job).state == "RUNNING"
    again = _rbs(cluster, "attach", job)
    assert again.stdin is not None
    again.stdin.write(b"x\n")
    again.stdin.flush()
    _read_until(again, b"got x\n")
    out, err = again.communicate(b"", timeout=180)  # EOF ends the loop: exit 3
    assert again.returncode == 3, err.decode()
    assert b"ready" not in out  # output from now on, as sattach
    wait_for("the job's end", lambda: client.show(job).state == "FAILED")


def test_attach_names_what_is_wrong(cluster: JobCluster) -> None:
    for job, why in (("999", b"no such job"), ("abc", b"not a job id")):
        proc = _rbs(cluster, "attach", job)
        _, err = proc.communicate(b"", timeout=120)
        assert proc.returncode == 2
        assert why in err and b"Traceback" not in err
