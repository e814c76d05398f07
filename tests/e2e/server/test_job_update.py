"""`rbs job update` against `rbs remote serve` with tokens: who may change what, and the log line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs_harness import spawn_rbs, stop_process, wait_ready

pytestmark = pytest.mark.timeout(180)


def rbs(*args: str, token: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RBS_REMOTE")}
    extra = ["--token-file", str(token)] if token else []
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args[:2], *extra, *args[2:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Path]]]:
    """A server (no workers: jobs stay PENDING) and token files for alice, bob and root."""
    tmp = tmp_path_factory.mktemp("update")
    tokens = tmp / "tokens.toml"
    files = {}
    for user, role in (("alice", "user"), ("bob", "user"), ("root", "admin")):
        added = rbs("remote", "token", "add", "--user", user, "--role", role,
                    "--tokens-file", str(tokens))  # fmt: skip
        assert added.returncode == 0, added.stderr
        files[user] = tmp / f"{user}.token"
        files[user].write_text(added.stdout.strip())
    log, ready = tmp / "server.log", tmp / "ready.json"
    config = tmp / "server.toml"
    config.write_text('[jobs]\nqueues = [{ name = "short", default_time = "30m" }]\n')
    args = ["remote", "serve", "--port", "0", "--data-dir", str(tmp / "data")]
    args += ["--config", str(config)]
    proc = spawn_rbs([*args, "--tokens-file", str(tokens), "--ready-file", str(ready)], log)
    try:
        info = wait_ready(proc, ready, log)
        yield f"127.0.0.1:{info['port']}", files
    finally:
        stop_process(proc)


def show(server: str, token: Path, job: str) -> dict[str, object]:
    r = rbs("job", "show", "--server", server, job, "--json", token=token)
    assert r.returncode == 0, r.stderr
    doc: dict[str, object] = json.loads(r.stdout)
    return doc


def test_update_a_pending_job(cluster: tuple[str, dict[str, Path]]) -> None:
    server, t = cluster
    at = ["--server", server]
    r = rbs("job", "submit", *at, "--priority", "5", "--time", "10m", "--begin", "2h",
            "--", "true", token=t["alice"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert show(server, t["alice"], job)["reason"] == "BeginTime"

    r = rbs("job", "update", *at, job, "--priority", "2", "--time", "5m", token=t["alice"])
    assert r.returncode == 0, r.stderr
    info = show(server, t["alice"], job)
    assert info["priority"]["base"] == 2 and info["time_limit"] == "5m"  # type: ignore[index]
    assert info["provenance"]["priority"] == "flag --priority"  # type: ignore[index]

    r = rbs("job", "update", *at, job, "--priority", "9", token=t["alice"])
    assert r.returncode == 2 and "takes the admin role" in r.stderr, r.stderr
    r = rbs("job", "update", *at, job, "--priority", "1", token=t["bob"])
    assert r.returncode == 2 and "belongs to alice" in r.stderr, r.stderr
    r = rbs("job", "update", *at, job, "--priority", "9", token=t["root"])
    assert r.returncode == 0, r.stderr
    assert show(server, t["alice"], job)["priority"]["base"] == 9  # type: ignore[index]

    r = rbs("job", "update", *at, job, "--begin", "", token=t["alice"])
    assert r.returncode == 0, r.stderr
    info = show(server, t["alice"], job)
    assert info["reason"] != "BeginTime" and info["manifest"]["begin_time"] is None  # type: ignore[index]

    r = rbs("job", "logs", *at, job, token=t["alice"])
    assert r.returncode == 0, r.stderr
    assert "updated by alice: --priority 5 -> 2, --time 10m -> 5m" in r.stdout
    assert "updated by root: --priority 2 -> 9" in r.stdout
    assert "updated by alice: --begin 20" in r.stdout and "-> none" in r.stdout

    for flags, message in (
        (["--queue", "nope"], "--queue 'nope': unknown queue"),
        (["--time", "soon"], "--time"),
        (["--begin", "whenever"], "--begin 'whenever'"),
        ([], "nothing to change"),
    ):
        r = rbs("job", "update", *at, job, *flags, token=t["alice"])
        assert r.returncode == 2 and message in r.stderr, (flags, r.stderr)
        assert "Traceback" not in r.stderr

    assert rbs("job", "cancel", *at, job, token=t["alice"]).returncode == 0
    r = rbs("job", "update", *at, job, "--priority", "0", token=t["alice"])
    assert r.returncode == 2 and "only a pending job" in r.stderr, r.stderr
    # The ended job shows what the updates made of it (the journal's row).
    assert show(server, t["alice"], job)["priority"]["base"] == 9  # type: ignore[index]


def test_the_log_names_a_queue_default_time_limit_that_an_update_shortens(
    cluster: tuple[str, dict[str, Path]],
) -> None:
    server, t = cluster
    at = ["--server", server]
    r = rbs("job", "submit", *at, "--queue", "short", "--begin", "2h", "--", "true",
            token=t["alice"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    r = rbs("job", "update", *at, job, "--time", "10m", token=t["alice"])
    assert r.returncode == 0, r.stderr
    r = rbs("job", "logs", *at, job, token=t["alice"])
    assert "updated by alice: --time 30m (from queue short) -> 10m" in r.stdout, r.stdout
    assert rbs("job", "cancel", *at, job, token=t["alice"]).returncode == 0


def test_reservations_and_drains_take_the_admin_role(cluster: tuple[str, dict[str, Path]]) -> None:
    server, t = cluster
    at = ["--server", server]
    r = rbs("job", "reserve", *at, "m", "--in", "1h", "--for", "1h", token=t["alice"])
    assert r.returncode == 2 and "take the admin role" in r.stderr, r.stderr
    r = rbs("remote", "drain", *at, "w1", token=t["alice"])
    assert r.returncode == 2 and "take the admin role" in r.stderr, r.stderr
    r = rbs("job", "reserve", *at, "m", "--in", "1h", "--for", "1h", token=t["root"])
    assert r.returncode == 0, r.stderr
    r = rbs("job", "reservations", *at, token=t["alice"])  # anyone may look
    assert r.returncode == 0 and r.stdout.startswith("m: "), r.stderr
    assert rbs("job", "reserve", *at, "m", "--cancel", token=t["root"]).returncode == 0
