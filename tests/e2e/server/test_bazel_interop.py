"""Real Bazel (Debian's bazel-bootstrap 4.2) executing on an rbs server configured as
other REAPI servers often are: SHA256 only, with a named instance."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bazel_runner import BAZEL, BazelRunner
from exec_cluster import Cluster

pytestmark = [
    pytest.mark.bazel,
    pytest.mark.skipif(
        BAZEL is None, reason="bazel is not installed (make test installs bazel-bootstrap)"
    ),
]

RULES = 6


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "WORKSPACE").write_text("")
    (ws / ".bazelrc").write_text("build --nosandbox_debug\n")
    (ws / "in.txt").write_text("instance words\n")
    rules = ['genrule(name = "r0", srcs = ["in.txt"], outs = ["r0.txt"], cmd = "cat $< > $@")']
    rules += [
        f'genrule(name = "r{i}", srcs = [":r{i - 1}"], outs = ["r{i}.txt"], '
        f'cmd = "cat $< > $@ && echo {i} >> $@")'
        for i in range(1, RULES)
    ]
    (ws / "BUILD").write_text("\n".join(rules) + "\n")
    return ws


class Bazel(BazelRunner):
    def build(self, port: int, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.run(
            "build",
            f"--remote_executor=grpc://127.0.0.1:{port}",
            "--experimental_repository_disable_download",
            "--incompatible_strict_action_env",
            "--jobs=8",
            *flags,
            "//:all",
        )


@pytest.fixture
def bazel(tmp_path: Path) -> Iterator[Bazel]:
    b = Bazel(_workspace(tmp_path), tmp_path)
    try:
        yield b
    finally:
        b.shutdown()


def _remote(output: str) -> int:
    m = re.search(r"(\d+) remote[.,]", output)
    return int(m[1]) if m else 0


def _check(ws: Path) -> None:
    want = "instance words\n" + "".join(f"{i}\n" for i in range(1, RULES))
    assert (ws / "bazel-bin" / f"r{RULES - 1}.txt").read_text() == want


@pytest.mark.timeout(400)
def test_named_instance_on_a_sha256_only_server(bazel: Bazel, tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path / "cluster",
        server_args=("--digest-function", "sha256", "--instance-name", "foo"),
        build_slots=2,
    )
    (tmp_path / "cluster").mkdir()
    cluster.start()
    try:
        # The worker reads the inputs Bazel uploaded for instance foo.
        r = bazel.build(cluster.port, "--remote_instance_name=foo")
        assert r.returncode == 0, r.stderr[-3000:]
        assert _remote(r.stderr) == RULES, r.stderr[-1500:]
        _check(bazel.ws)
        assert bazel.run("clean").returncode == 0
        again = bazel.build(cluster.port, "--remote_instance_name=foo")
        assert again.returncode == 0, again.stderr[-3000:]
        assert f"{RULES} remote cache hit" in again.stderr, again.stderr[-1500:]
        # The default instance is still served, and has its own action cache.
        assert bazel.run("clean").returncode == 0
        default = bazel.build(cluster.port)
        assert default.returncode == 0, default.stderr[-3000:]
        assert _remote(default.stderr) == RULES, default.stderr[-1500:]
        _check(bazel.ws)
        # An instance the server does not serve is refused, naming the accepted ones.
        bad = bazel.build(cluster.port, "--remote_instance_name=bar")
        assert bad.returncode != 0
        assert "unknown instance name 'bar'" in bad.stderr, bad.stderr[-2000:]
    finally:
        cluster.stop()
