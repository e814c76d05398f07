"""`rbs remote serve --tokens-file` as a subprocess: `rbs remote token add`, SIGHUP, the shared token."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from jobs_harness import spawn_rbs, stop_process, wait_for, wait_ready

from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient
from rbs.server.tokens import hash_token

pytestmark = pytest.mark.timeout(120)


def rbs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _accepted(address: str, token: str) -> bool:
    with JobsClient(address, token=token) as c:
        try:
            c.queues()
        except JobError as e:
            assert "wrong token" in str(e), e
            return False
    return True


def test_token_add_then_sighup_loads_it_and_a_bad_file_keeps_the_old(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    added = rbs("remote", "token", "add", "--user", "alice", "--tokens-file", str(tokens))
    assert added.returncode == 0, added.stderr
    alice = added.stdout.strip()
    assert "shown only now" in added.stderr
    assert alice not in tokens.read_text() and hash_token(alice) in tokens.read_text()
    bad_role = rbs(
        "remote", "token", "add", "--user", "x", "--role", "boss", "--tokens-file", str(tokens)
    )
    assert bad_role.returncode != 0 and "Traceback" not in bad_role.stderr

    log, ready = tmp_path / "server.log", tmp_path / "ready.json"
    args = ["remote", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    proc = spawn_rbs([*args, "--tokens-file", str(tokens), "--ready-file", str(ready)], log)
    try:
        info = wait_ready(proc, ready, log)
        address = f"127.0.0.1:{info['port']}"
        assert _accepted(address, alice)
        # A token added while the server runs is refused until SIGHUP loads it.
        bob = rbs("remote", "token", "add", "--user", "bob", "--tokens-file", str(tokens))
        bob_token = bob.stdout.strip()
        assert not _accepted(address, bob_token)
        os.kill(proc.pid, signal.SIGHUP)
        wait_for("SIGHUP to load bob's token", lambda: _accepted(address, bob_token))
        # A file that does not load changes nothing, and the log says why.
        good = tokens.read_text()
        tokens.write_text(good + "\n[[token]]\nuser = 'eve'\n")
        os.kill(proc.pid, signal.SIGHUP)
        wait_for("the refused reload in the log", lambda: "kept the tokens" in log.read_text())
        assert _accepted(address, bob_token) and _accepted(address, alice)
        text = log.read_text()
        assert alice not in text and bob_token not in text
    finally:
        stop_process(proc)


def test_the_shared_token_file_still_works_and_the_log_says_what_it_is(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("shared-secret-1234\n")
    log, ready = tmp_path / "server.log", tmp_path / "ready.json"
    args = ["remote", "serve", "--port", "0", "--data-dir", str(tmp_path / "data")]
    proc = spawn_rbs([*args, "--token-file", str(token_file), "--ready-file", str(ready)], log)
    try:
        info = wait_ready(proc, ready, log)
        address = f"127.0.0.1:{info['port']}"
        assert "acts as admin and as worker" in log.read_text()
        with JobsClient(address, token="shared-secret-1234") as c:
            job = c.submit(["true"])
            c.cancel([job])
            assert c.show(job).raw["changes"][0]["action"] == "cancel"
        assert not _accepted(address, "shared-secret-123")
    finally:
        stop_process(proc)


def test_the_embedded_cluster_records_the_login_name(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
    env["RBS_HOME"] = str(tmp_path / "home")
    try:
        sub = rbs("job", "submit", "--", "true", env=env)
        assert sub.returncode == 0, sub.stderr
        job = sub.stdout.strip().split()[-1]
        shown = rbs("job", "show", job, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["user"] == getpass.getuser()
        plain = rbs("job", "show", job, env=env)
        assert getpass.getuser() in plain.stdout
        listed = rbs("job", "list", "--history", "--user", getpass.getuser(), env=env)
        header, row = listed.stdout.splitlines()[:2]
        assert row.split()[0] == job
        assert row[header.index("USER") :].split()[0] == getpass.getuser()
        none = rbs("job", "list", "--history", "--user", "nobody-else", env=env)
        assert job not in [line.split()[0] for line in none.stdout.splitlines()[1:]]
    finally:
        rbs("remote", "down", env=env)
