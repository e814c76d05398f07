"""A job builds on the cluster's build slots with its scoped token while every job slot is full.

The fleet is one worker with one job slot and one build slot; the job takes the job
slot and runs `rbs build --remote "$RBS_REMOTE" //...` and `rbs job submit`, with
nothing but the environment the server gave its run (RBS_REMOTE, RBS_REMOTE_TOKEN) on
a server that requires tokens.
"""

from __future__ import annotations

import shlex
import sqlite3
import sys
from pathlib import Path

import pytest
from test_job_auth import AuthCluster

from rbs.server.tokens import add_token

pytestmark = pytest.mark.timeout(180)

BUILD = """\
genrule(
    name = "upper",
    srcs = ["words.txt"],
    outs = ["upper.txt"],
    cmd = "tr a-z A-Z < $< > $@",
)

genrule(
    name = "count",
    srcs = [":upper.txt"],
    outs = ["count.txt"],
    cmd = "wc -l < $(location :upper.txt) | tr -d ' ' > $@",
)
"""


def test_a_job_builds_on_the_build_slots_of_a_full_fleet(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "WORKSPACE").write_text("")
    (ws / "pkg" / "BUILD").write_text(BUILD)
    (ws / "pkg" / "words.txt").write_text("hello\nworld\n")
    tokens = tmp_path / "tokens.toml"
    alice = add_token(tokens, "alice", "user")
    worker = add_token(tokens, "w1", "worker")
    cluster = AuthCluster(tmp_path / "server", tokens)
    cluster.admin = add_token(tokens, "root", "admin")
    assert cluster.server is not None and cluster.server.reload_tokens()
    try:
        cluster.token_worker(tmp_path / "w1", worker, job_slots=1)
        rbs = f"{shlex.quote(sys.executable)} -m rbs"
        script = (
            f"cd {shlex.quote(str(ws))} && "
            f'{rbs} build --remote "$RBS_REMOTE" //... && '
            f"cat rbs-out/bin/pkg/count.txt && "
            f"{rbs} job submit --name child -- true"
        )
        job = cluster.as_(alice).submit(["sh", "-c", script], name="builder")
        done = cluster.wait(job, timeout=150)
        lines = [x.text for x in cluster.as_(alice).logs(job)]
        assert done.state == "COMPLETED", lines
        assert "2" in lines, lines  # count.txt: two lines, upper-cased remotely
        assert (ws / "rbs-out/bin/pkg/upper.txt").read_text() == "HELLO\nWORLD\n"
        # Both genrules ran as REAPI operations on the build slot (stage 4: COMPLETED).
        with sqlite3.connect(tmp_path / "server" / "execution.db") as db:
            (ops,) = db.execute("SELECT count(*) FROM operations WHERE stage = 4").fetchone()
        assert ops >= 2
        # The child the job submitted is alice's, with the builder as its parent; it
        # waits for the job slot the builder held.
        child = next(j for j in cluster.as_(alice).list_jobs(history=True) if j.name == "child")
        assert (child.raw["user"], child.raw["parent"]) == ("alice", job)
    finally:
        cluster.stop()
