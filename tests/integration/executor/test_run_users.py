"""Runs under uids of their own: a job and a build action look for credentials and find none.

A real `rbs remote serve` (with a token) and `rbs remote worker --run-uids` (the token in
its environment, as a unit file gives it) as subprocesses, as root. Each probe prints
what it could read; the test asserts that the worker's token shows nowhere and that
every probe was refused. Without --run-uids, the worker's log and each job's log say
which guarantees do not hold.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import grpc
import pytest
from jobs_harness import JobCluster, wait_for
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.client.jobs import JobsClient
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import RemoteStore

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="switching users needs root and setpriv",
)
UIDS = (200000, 265535)

# What a run tries; each line ends "refused" unless it read something it must not.
PROBE = r"""
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep NoNewPrivs /proc/self/status
for f in /proc/[0-9]*/environ; do cat "$f" 2>/dev/null | tr '\0' '\n'; done
for p in "$TOKEN_FILE" "$WORK/cas" "$WORK/jobs" "$WORK/sandboxes" "$WORK" "$OTHER" "$OTHER/note" \
         "$OTHER/../log.jsonl"; do
  [ -n "$p" ] || continue
  if [ -d "$p" ]; then ls -A "$p" >/dev/null 2>&1 && echo "LEAK $p" || echo "refused $p"
  else cat "$p" 2>/dev/null && echo "LEAK $p" || echo "refused $p"; fi
done
touch /tmp/mine-$$ && echo "tmp: $(ls -A /tmp | tr '\n' ' ')"
"""


@dataclass
class Fleet:
    root: Path
    secret: str
    address: str
    procs: list[subprocess.Popen[bytes]]

    @property
    def work(self) -> Path:
        return self.root / "w"

    def client(self) -> JobsClient:
        return JobsClient(self.address, token=self.secret)


def _spawn(
    args: list[str], out: int, err: BinaryIO, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "rbs", "remote", *args]
    return subprocess.Popen(cmd, stdout=out, stderr=err, env=env)


def _start(root: Path, secret: str) -> Fleet:
    token = root / "token"
    token.write_text(secret + "\n")
    token.chmod(0o600)
    (root / "server").mkdir(mode=0o700)
    env = {**os.environ, "RBS_REMOTE_TOKEN": secret}
    with open(root / "server.log", "wb") as err:
        server = _spawn(
            ["serve", "--port", "0", "--data-dir", str(root / "server"), "--token-file",
             str(token), "--log-level", "warning"], subprocess.PIPE, err, env,
        )  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline().decode()
    m = re.search(r"serving on [\d.]+:(\d+)", line)
    assert m, f"server did not start: {line!r}"
    address = f"127.0.0.1:{m[1]}"
    ready = root / "worker.ready"
    with open(root / "worker.log", "wb") as err:
        worker = _spawn(
            ["worker", "--server", address, "--work-dir", str(root / "w"), "--run-uids",
             f"{UIDS[0]}-{UIDS[1]}", "--job-slots", "3", "--build-slots", "2", "--ready-file",
             str(ready), "--log-level", "info"], subprocess.DEVNULL, err, env,
        )  # fmt: skip
    fleet = Fleet(root=root, secret=secret, address=address, procs=[server, worker])

    def registered() -> bool:
        if worker.poll() is not None:
            raise RuntimeError((root / "worker.log").read_text())
        return ready.exists()

    wait_for("the worker to register", registered, timeout=60)
    json.loads(ready.read_text())
    return fleet


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    # Outside /tmp (runs get a /tmp of their own) and with o+x on every parent.
    root = Path(tempfile.mkdtemp(prefix="rbs-run-users-", dir="/var/tmp"))
    root.chmod(0o711)
    fleet = None
    try:
        fleet = _start(root, "worker-secret-" + secrets.token_hex(16))
        yield fleet
    finally:
        for proc in reversed(fleet.procs if fleet else []):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def _out(client: JobsClient, job: str) -> list[str]:
    return [ln.text for ln in client.logs(job) if ln.stream == "out"]


def _uid(lines: list[str]) -> int:
    (line,) = [x for x in lines if x.startswith("uid=")]
    uid = int(line.split()[0].removeprefix("uid="))
    assert line == f"uid={uid} gid={uid} groups={uid}"  # no supplementary groups
    return uid


def _assert_nothing_leaked(lines: list[str], secret: str, probes: int) -> None:
    text = "\n".join(lines)
    assert secret not in text
    assert not [x for x in lines if x.startswith("LEAK")], text
    assert len([x for x in lines if x.startswith("refused ")]) == probes, text
    assert "NoNewPrivs:\t1" in lines


def test_a_job_finds_no_credentials_and_no_other_run(fleet: Fleet, tmp_path: Path) -> None:
    client = fleet.client()
    # The other run: holds a note in its folder until the probe is done.
    other = client.submit(
        ["sh", "-c", "echo uid=$(id -u) gid=$(id -g) groups=$(id -G); echo hidden > note; "
         "touch /tmp/other-was-here; while [ ! -e go ]; do sleep 0.05; done"],
    )  # fmt: skip
    note = wait_for(
        "the other run's note", lambda: next(iter(fleet.work.glob("jobs/*/work/note")), None)
    )
    env = [f"TOKEN_FILE={fleet.root / 'token'}", f"WORK={fleet.work}", f"OTHER={note.parent}"]
    probe = client.submit(["sh", "-c", PROBE + "echo made > out.txt"], env=env, outputs=["out.txt"])
    probed = client.wait(probe, timeout=60)
    (note.parent / "go").touch()
    assert client.wait(other, timeout=60).state == "COMPLETED"
    assert (probed.state, probed.exit_code) == ("COMPLETED", 0)
    lines = _out(client, probe)
    _assert_nothing_leaked(lines, fleet.secret, probes=8)
    # Its environment is what the manifest and scheduler give, with a HOME of its own.
    homes = {x for x in lines if x.startswith("HOME=")}
    assert homes and all(h.startswith(f"HOME={fleet.work}/jobs/") for h in homes), homes
    assert not [x for x in lines if x.startswith(("USER=", "LOGNAME=", "RBS_REMOTE_TOKEN=w"))]
    uid, other_uid = _uid(lines), _uid(_out(client, other))
    assert uid != other_uid and UIDS[0] <= min(uid, other_uid) <= max(uid, other_uid) <= UIDS[1]
    # A /tmp of its own: only its own file, not the other run's, and not in the host's.
    (tmp_line,) = [x for x in lines if x.startswith("tmp:")]
    assert tmp_line.split()[1:] and all(f.startswith("mine-") for f in tmp_line.split()[1:])
    assert not list(Path("/tmp").glob("mine-*")) and not Path("/tmp/other-was-here").exists()
    # Outputs and logs work as before; the log says who the run was.
    got = client.outputs(probe, tmp_path / "outs")
    assert (got / "out.txt").read_text() == "made\n"
    sys_lines = [ln.text for ln in client.logs(probe) if ln.stream == "sys"]
    assert (
        f"user: uid {uid} gid {uid} (no other groups, no_new_privs), a private /tmp"
        in "\n".join(sys_lines)
    )
    client.close()


def test_cgroup_limits_still_hold_for_a_run_user(fleet: Fleet) -> None:
    client = fleet.client()
    job = client.submit(
        ["/usr/bin/python3", "-c", "b = bytearray(400 << 20); print(len(b))"], memory_gb=0.0625
    )
    info = client.wait(job, timeout=60)
    sys_text = "\n".join(ln.text for ln in client.logs(job) if ln.stream == "sys")
    if "running without a cgroup" in sys_text:
        pytest.skip("this host gives jobs no memory cgroup")
    assert info.state == "OUT_OF_MEMORY", sys_text
    client.close()


def test_a_build_action_finds_no_credentials(fleet: Fleet) -> None:
    channel = grpc.insecure_channel(fleet.address)
    cas = RemoteStore(channel, token=fleet.secret)
    other = str(fleet.work / "jobs")  # where the job runs' folders are
    env = {"TOKEN_FILE": str(fleet.root / "token"), "WORK": str(fleet.work), "OTHER": other}
    digest = make_action(
        cas, ["/bin/sh", "-c", PROBE + "echo built > out.txt"], env=env, outputs=["out.txt"],
        do_not_cache=True,
    )  # fmt: skip
    stub = re_grpc.ExecutionStub(channel)
    req = re_pb2.ExecuteRequest(
        action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
        digest_function=re_pb2.DigestFunction.BLAKE3,
    )
    meta = (("authorization", f"Bearer {fleet.secret}"),)
    ops = list(stub.Execute(req, timeout=60, metadata=meta))
    resp = re_pb2.ExecuteResponse()
    assert ops[-1].done and ops[-1].response.Unpack(resp)
    assert resp.status.code == 0 and resp.result.exit_code == 0, resp
    out = resp.result.stdout_digest
    stdout = cas.get(Digest(function=DigestFunction.BLAKE3, hash=out.hash, size=out.size_bytes))
    lines = stdout.decode().splitlines()
    _assert_nothing_leaked(lines, fleet.secret, probes=8)
    assert UIDS[0] <= _uid(lines) <= UIDS[1]
    (tmp_line,) = [x for x in lines if x.startswith("tmp:")]
    assert all(f.startswith("mine-") for f in tmp_line.split()[1:])
    (made,) = resp.result.output_files
    d = Digest(function=DigestFunction.BLAKE3, hash=made.digest.hash, size=made.digest.size_bytes)
    assert cas.get(d) == b"built\n"
    channel.close()


def test_the_worker_log_says_what_holds(fleet: Fleet) -> None:
    log = (fleet.root / "worker.log").read_text()
    assert f"run as uids {UIDS[0]}-{UIDS[1]} (one per run" in log
    assert "each with its tmp folder at /tmp (a mount namespace)" in log


def test_without_run_uids_the_logs_say_which_guarantees_do_not_hold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="rbs.executor.runuser")
    cluster = JobCluster(tmp_path / "server")
    try:
        cluster.add_worker(tmp_path / "w", job_slots=1)
        client = cluster.client()
        job = client.submit(["true"])
        assert cluster.wait(job).state == "COMPLETED"
        warned = [ln.text for ln in client.logs(job) if "to isolate runs" in ln.text]
        assert len(warned) == 1 and ln_ok(warned[0])
        assert any(
            "jobs and build actions run as the worker's own user (root), not uids of their own"
            in r.getMessage()
            for r in caplog.records
        )
    finally:
        cluster.stop()


def ln_ok(text: str) -> bool:
    return text.startswith("the job runs as the worker's own user (root)") and "--run-uids" in text
