"""An $RBS_HOME written by rbs 0.1 (see tests/fixtures) opens with today's CLI, losing nothing."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import grpc
import pytest
from google.rpc import code_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NAME = "rbs_home_v0_1"
EXPECT: dict[str, Any] = json.loads((FIXTURES / f"{NAME}.json").read_text())
# Above the largest pid_max Linux allows (2**22): no process can have these ids.
GONE_PIDS = (2**22 + 1, 2**22 + 2)
# A job's age bonus grows with the time since it became eligible, also once it ended
# (as it did before the move): these values depend on the clock, not on the data.
CLOCK_RELATIVE = (".priority.age_bonus", ".priority.total")


def _by_id(job: str) -> list[int]:
    return [int(part) for part in job.split("_")]


SHOWN = sorted(map(str, EXPECT["show"]), key=_by_id)
# Jobs the old rbs left PENDING; they run under today's rbs, so only what they were
# asked to do is compared, not their state.
PENDING = sorted((j for j, doc in EXPECT["show"].items() if doc["state"] == "PENDING"), key=_by_id)
ENDED = sorted((j for j in EXPECT["show"] if j not in PENDING), key=_by_id)
STABLE = ("job_id", "name", "queue", "manifest", "provenance", "submit_time", "resources")


@dataclass(frozen=True, slots=True, kw_only=True)
class OldHome:
    home: Path
    workspace: Path


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
    env["RBS_HOME"] = str(home)
    return env


def rbs(home: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        env=_env(home),
        cwd=cwd or home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OldHome]:
    top = tmp_path_factory.mktemp("old-data")
    with tarfile.open(FIXTURES / f"{NAME}.tar.gz") as tar:
        tar.extractall(top, filter="data")
    home = top / NAME / "rbs_home"
    local = home / "local"
    # As after a reboot: cluster.json names a server and worker that are gone.
    (local / "cluster.json").write_text(
        json.dumps(
            {
                "host": "127.0.0.1",
                "grpc_port": 1,
                "http_port": 2,
                "server_pid": GONE_PIDS[0],
                "worker_pid": GONE_PIDS[1],
            }
        )
    )
    # The server answers for finished operations an hour; the fixture is older, so its
    # one operation is dated now, as for a restart within that hour.
    with contextlib.closing(sqlite3.connect(local / "server" / "execution.db")) as db, db:
        db.execute("UPDATE operations SET updated = ?", (time.time(),))
    try:
        # The first command starts a fresh cluster on the old data dir.
        r = rbs(home, "job", "list", "--json")
        assert r.returncode == 0, r.stderr
        assert "started a local cluster" in r.stderr
        cluster = json.loads((local / "cluster.json").read_text())
        assert cluster["server_pid"] not in GONE_PIDS
        yield OldHome(home=home, workspace=top / NAME / "workspace")
    finally:
        r = rbs(home, "remote", "down")
        assert r.returncode == 0, r.stderr


def assert_recorded(recorded: Any, now: Any, where: str = "$") -> None:
    """Every key and value recorded is there and equal; keys added since are allowed.

    Times are epoch seconds and compare exactly; only CLOCK_RELATIVE values may differ.
    """
    if where.endswith(CLOCK_RELATIVE):
        assert isinstance(now, int), f"{where}: now {now!r}"
    elif isinstance(recorded, dict):
        assert isinstance(now, dict), f"{where}: recorded {recorded!r}, now {now!r}"
        for key, value in recorded.items():
            assert key in now, f"{where}.{key} is gone"
            assert_recorded(value, now[key], f"{where}.{key}")
    elif isinstance(recorded, list):
        assert isinstance(now, list) and len(now) == len(recorded), (
            f"{where}: recorded {recorded!r}, now {now!r}"
        )
        for i, (a, b) in enumerate(zip(recorded, now, strict=True)):
            assert_recorded(a, b, f"{where}[{i}]")
    else:
        assert now == recorded, f"{where}: recorded {recorded!r}, now {now!r}"


def _lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_same_job(recorded: dict[str, Any], now: dict[str, Any]) -> None:
    job = recorded["job_id"]
    if job in PENDING:
        recorded = {k: recorded[k] for k in STABLE}
    assert_recorded(recorded, now, f"job {job}")


def test_job_list_shows_the_same_jobs_and_states(old: OldHome) -> None:
    # Active: the jobs left pending, or fewer once they ran.
    assert [doc["job_id"] for doc in EXPECT["list"]] == PENDING
    r = rbs(old.home, "job", "list", "--json")
    assert r.returncode == 0, r.stderr
    recorded = {doc["job_id"]: doc for doc in EXPECT["list"]}
    for doc in _lines(r.stdout):
        if doc["job_id"] in recorded:
            assert_same_job(recorded[doc["job_id"]], doc)
    r = rbs(old.home, "job", "list", "--history", "--json")
    assert r.returncode == 0, r.stderr
    now = {doc["job_id"]: doc for doc in _lines(r.stdout)}
    recorded = {doc["job_id"]: doc for doc in EXPECT["list_history"]}
    assert set(recorded) <= set(now)
    for job, doc in recorded.items():
        assert_same_job(doc, now[job])
    # Counts by state, of the jobs that had ended (the others may have run since).
    r = rbs(old.home, "remote", "status", "--json")
    assert r.returncode == 0, r.stderr
    counts = json.loads(r.stdout)["jobs_by_state"]
    expected = dict(EXPECT["jobs_by_state"])
    for job in PENDING:
        expected[EXPECT["show"][job]["state"]] -= 1
    # The jobs that had not ended may move on between the listing and this call, so
    # only their number is known: whatever states they are in, they add that many.
    extra = {state: counts.get(state, 0) - n for state, n in expected.items()}
    assert all(n >= 0 for n in extra.values()), (expected, counts)
    assert sum(extra.values()) == sum(1 for job in now if job not in ENDED), (expected, counts)


@pytest.mark.parametrize("job", SHOWN)
def test_job_show_gives_the_recorded_document(old: OldHome, job: str) -> None:
    r = rbs(old.home, "job", "show", job, "--json")
    assert r.returncode == 0, r.stderr
    assert_same_job(EXPECT["show"][job], json.loads(r.stdout))
    # Jobs journaled before jobs had owners show as submitted by `unknown`.
    assert json.loads(r.stdout)["user"] == "unknown"


@pytest.mark.parametrize("job", ENDED)
def test_job_logs_give_the_same_lines(old: OldHome, job: str) -> None:
    r = rbs(old.home, "job", "logs", job)
    assert r.returncode == 0, r.stderr
    assert {"stdout": r.stdout, "stderr": r.stderr} == EXPECT["logs"][job]
    r = rbs(old.home, "job", "logs", job, "--json")
    assert r.returncode == 0, r.stderr
    assert_recorded(EXPECT["logs_json"][job], _lines(r.stdout), f"job {job} logs")


def test_jobs_from_before_telemetry_have_none_and_show_still_works(old: OldHome) -> None:
    job = ENDED[0]
    r = rbs(old.home, "job", "telemetry", job, "--json")
    assert (r.returncode, r.stdout) == (0, ""), r.stderr
    r = rbs(old.home, "job", "show", job)
    assert r.returncode == 0, r.stderr
    assert "Telemetry" not in r.stdout
    assert r.stdout.split()[:2] == ["Job", job]


def test_job_outputs_fetch_the_same_bytes(old: OldHome, tmp_path: Path) -> None:
    for job, files in EXPECT["outputs"].items():
        dest = tmp_path / f"job-{job}"
        r = rbs(old.home, "job", "outputs", job, "--dest", str(dest))
        assert r.returncode == 0, r.stderr
        got = {
            p.relative_to(dest).as_posix(): p.read_text() for p in dest.rglob("*") if p.is_file()
        }
        assert got == files


def test_cas_get_returns_the_blob_and_the_tree(old: OldHome, tmp_path: Path) -> None:
    digest, text = EXPECT["cas"]["blob"]
    r = rbs(old.home, "cas", "get", digest)
    assert (r.returncode, r.stdout) == (0, text), r.stderr
    digest, files = EXPECT["cas"]["tree"]
    dest = tmp_path / "tree"
    r = rbs(old.home, "cas", "get", digest, "-o", str(dest))
    assert r.returncode == 0, r.stderr
    got = {p.relative_to(dest).as_posix(): p.read_text() for p in dest.rglob("*") if p.is_file()}
    assert got == files


def test_remote_build_hits_the_old_action_cache(old: OldHome, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(old.workspace, ws)
    port = json.loads((old.home / "local" / "cluster.json").read_text())["grpc_port"]
    build = EXPECT["build"]
    r = rbs(old.home, "build", build["target"], "--remote", f"127.0.0.1:{port}", "--plain", cwd=ws)
    assert r.returncode == 0, r.stderr
    assert "0 run, 1 cache hits" in r.stderr, r.stderr
    assert (ws / build["output"]).read_text() == build["text"]


def test_the_old_operation_still_answers(old: OldHome) -> None:
    port = json.loads((old.home / "local" / "cluster.json").read_text())["grpc_port"]
    op = EXPECT["build"]["operation"]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = re_grpc.ExecutionStub(channel)
        ops = list(stub.WaitExecution(re_pb2.WaitExecutionRequest(name=op["name"]), timeout=30))
    resp = re_pb2.ExecuteResponse()
    assert ops[-1].done and ops[-1].response.Unpack(resp)
    assert resp.status.code == code_pb2.OK, resp.status.message
    md = re_pb2.ExecuteOperationMetadata()
    assert ops[-1].metadata.Unpack(md)
    assert f"{md.action_digest.hash}/{md.action_digest.size_bytes}" == op["action"]
    text = EXPECT["build"]["text"].encode()
    [out] = resp.result.output_files
    assert (out.digest.hash, out.digest.size_bytes) == (blake3.blake3(text).hexdigest(), len(text))


def test_jobs_left_pending_run_now(old: OldHome, tmp_path: Path) -> None:
    # Job 9 waits for a begin time (long past, unless the fixture was made just now).
    r = rbs(old.home, "job", "wait", *PENDING, "--timeout", "90")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.split() == [w for j in PENDING for w in (j, "COMPLETED")]
    r = rbs(old.home, "job", "logs", "9")
    assert "began" in r.stdout.splitlines(), r.stdout
    # Job 10: the env and the inputs staged by the old rbs, the outputs it declared.
    r = rbs(old.home, "job", "logs", "10")
    assert {"staged before the move", "hello from before"} <= set(r.stdout.splitlines())
    r = rbs(old.home, "job", "outputs", "10", "--dest", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "res.txt").read_text() == "staged before the move\nran\n"
    r = rbs(old.home, "job", "show", "10", "--json")
    doc = json.loads(r.stdout)
    assert (doc["state"], doc["exit_code"], doc["attempts"]) == ("COMPLETED", 0, 1)
    assert doc["dependencies"] == [{"dep": "afterok:9", "state": "COMPLETED"}]


def test_a_new_job_gets_the_next_id_and_runs(old: OldHome) -> None:
    last = max(int(doc["job_id"]) for doc in EXPECT["list_history"])
    r = rbs(old.home, "job", "submit", "--", "sh", "-c", "echo after the move")
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job == str(last + 1)
    r = rbs(old.home, "job", "wait", job, "--timeout", "60")
    assert (r.returncode, r.stdout.split()) == (0, [job, "COMPLETED"]), r.stderr
    r = rbs(old.home, "job", "logs", job)
    assert "after the move" in r.stdout.splitlines()
