"""Bazel inside a job executes its actions on the cluster with the run's scoped token.

The job reads only what the server put in its run's environment: `RBS_REMOTE` for
`--remote_executor=grpc://...` and `RBS_REMOTE_TOKEN` for the authorization header,
on a server that requires tokens, while the job holds the fleet's only job slot.
"""

from __future__ import annotations

import shlex
import sqlite3
from pathlib import Path

import pytest
from bazel_runner import BAZEL
from test_job_auth import AuthCluster

from rbs.server.tokens import add_token

pytestmark = [
    pytest.mark.bazel,
    pytest.mark.timeout(420),
    pytest.mark.skipif(
        BAZEL is None, reason="bazel is not installed (make test installs bazel-bootstrap)"
    ),
]


def test_bazel_in_a_job_executes_on_the_build_slots(tmp_path: Path) -> None:
    assert BAZEL is not None
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / "words.txt").write_text("remote words\n")
    (ws / "BUILD").write_text(
        'genrule(name = "up", srcs = ["words.txt"], outs = ["up.txt"], '
        'cmd = "tr a-z A-Z < $< > $@")\n'
    )
    (tmp_path / "home").mkdir()
    tokens = tmp_path / "tokens.toml"
    alice = add_token(tokens, "alice", "user")
    worker = add_token(tokens, "w1", "worker")
    cluster = AuthCluster(tmp_path / "server", tokens)
    cluster.admin = add_token(tokens, "root", "admin")
    assert cluster.server is not None and cluster.server.reload_tokens()
    bazel = f"{shlex.quote(BAZEL)} --output_user_root={shlex.quote(str(tmp_path / 'root'))}"
    script = (
        f"cd {shlex.quote(str(ws))} && export HOME={shlex.quote(str(tmp_path / 'home'))} && "
        f"{bazel} --max_idle_secs=60 build "
        '--remote_executor="grpc://$RBS_REMOTE" '
        '--remote_header="authorization=Bearer $RBS_REMOTE_TOKEN" '
        "--experimental_repository_disable_download --incompatible_strict_action_env //:up; "
        f"rc=$?; {bazel} shutdown; exit $rc"
    )
    try:
        cluster.token_worker(tmp_path / "w1", worker, job_slots=1)
        job = cluster.as_(alice).submit(["sh", "-c", script], name="bazel")
        done = cluster.wait(job, timeout=380)
        lines = [x.text for x in cluster.as_(alice).logs(job)]
        assert done.state == "COMPLETED", lines[-40:]
        assert (ws / "bazel-bin" / "up.txt").read_text() == "REMOTE WORDS\n"
        assert any("1 remote" in line for line in lines), lines[-40:]
        with sqlite3.connect(tmp_path / "server" / "execution.db") as db:
            (ops,) = db.execute("SELECT count(*) FROM operations WHERE stage = 4").fetchone()
        assert ops >= 1
    finally:
        cluster.stop()
