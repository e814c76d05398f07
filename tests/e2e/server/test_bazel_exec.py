"""Real Bazel (Debian's bazel-bootstrap 4.2) executing every action on an rbs worker."""

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

TOKEN = "exec-test-token"
CHAIN = 4


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    (ws / "tools").mkdir(parents=True)
    (ws / "WORKSPACE").write_text("")
    (ws / ".bazelrc").write_text("build --nosandbox_debug\n")
    (ws / "tools" / "BUILD").write_text('exports_files(["upper.sh"])\n')
    upper = ws / "tools" / "upper.sh"
    upper.write_text('#!/bin/sh\ntr a-z A-Z < "$1" > "$2"\n')
    upper.chmod(0o755)
    (ws / "words.txt").write_text("remote words\n")
    rules = [
        'genrule(name = "g0", srcs = ["words.txt"], outs = ["g0.txt"], '
        'cmd = "cat $< > $@ && hostname >/dev/null && echo seed >> $@")'
    ]
    for i in range(1, CHAIN):
        rules.append(
            f'genrule(name = "g{i}", srcs = [":g{i - 1}"], outs = ["g{i}.txt"], '
            f'cmd = "cat $< > $@ && echo step{i} >> $@")'
        )
    rules.append(
        'genrule(name = "up", srcs = [":g0"], outs = ["up.txt"], tools = ["//tools:upper.sh"], '
        'cmd = "$(location //tools:upper.sh) $< $@")'
    )
    rules.append(
        'genrule(name = "two", outs = ["a/one.txt", "b/two.txt"], '
        'cmd = "echo 1 > $(location a/one.txt) && echo 2 > $(location b/two.txt)")'
    )
    (ws / "BUILD").write_text("\n".join(rules) + "\n")
    (ws / "fail").mkdir()
    (ws / "fail" / "BUILD").write_text(
        'genrule(name = "bad", outs = ["bad.txt"], cmd = "echo boom-from-the-worker >&2; exit 3")\n'
    )
    return ws


class Bazel(BazelRunner):
    """Bazel against the rbs server under test."""

    def build(
        self, port: int, *flags: str, target: str = "//:all"
    ) -> subprocess.CompletedProcess[str]:
        return self.run(
            "build",
            f"--remote_executor=grpc://127.0.0.1:{port}",
            "--experimental_repository_disable_download",
            "--incompatible_strict_action_env",
            "--jobs=16",
            *flags,
            target,
        )


@pytest.fixture
def bazel(tmp_path: Path) -> Iterator[Bazel]:
    b = Bazel(_workspace(tmp_path), tmp_path)
    try:
        yield b
    finally:
        b.shutdown()


def _remote_count(output: str) -> int:
    m = re.search(r"(\d+) remote[.,]", output)
    return int(m[1]) if m else 0


def _check_outputs(ws: Path) -> None:
    bin_ = ws / "bazel-bin"
    expected = "remote words\nseed\n" + "".join(f"step{i}\n" for i in range(1, CHAIN))
    assert (bin_ / f"g{CHAIN - 1}.txt").read_text() == expected
    assert (bin_ / "up.txt").read_text() == "REMOTE WORDS\nSEED\n"
    assert (bin_ / "a" / "one.txt").read_text() == "1\n"
    assert (bin_ / "b" / "two.txt").read_text() == "2\n"


@pytest.mark.timeout(300)
def test_every_action_runs_on_the_worker(bazel: Bazel, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path).start()
    try:
        r = bazel.build(cluster.port)
        assert r.returncode == 0, r.stderr[-3000:]
        actions = CHAIN + 2
        assert _remote_count(r.stderr) == actions, r.stderr[-1500:]
        assert "local" not in re.search(r"INFO: \d+ process.*", r.stderr)[0]  # type: ignore[index]
        _check_outputs(bazel.ws)
        # A clean rebuild is served from the action cache the executions filled.
        assert bazel.run("clean").returncode == 0
        again = bazel.build(cluster.port)
        assert again.returncode == 0, again.stderr[-3000:]
        assert re.search(rf"{actions} remote cache hit", again.stderr), again.stderr[-1500:]
        _check_outputs(bazel.ws)
        # --noremote_accept_cached executes again (skip_cache_lookup) and still agrees.
        assert bazel.run("clean").returncode == 0
        forced = bazel.build(cluster.port, "--noremote_accept_cached")
        assert forced.returncode == 0 and _remote_count(forced.stderr) == actions
        _check_outputs(bazel.ws)
    finally:
        cluster.stop()


@pytest.mark.timeout(300)
def test_token_required_for_remote_execution(bazel: Bazel, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, token=TOKEN).start()
    try:
        refused = bazel.build(cluster.port)
        assert refused.returncode != 0
        assert "UNAUTHENTICATED" in refused.stderr, refused.stderr[-2000:]
        ok = bazel.build(cluster.port, f"--remote_header=authorization=Bearer {TOKEN}")
        assert ok.returncode == 0, ok.stderr[-3000:]
        assert _remote_count(ok.stderr) == CHAIN + 2
        _check_outputs(bazel.ws)
        # A failing action fails the build with its exit code and its stderr, which
        # Bazel downloads from the CAS.
        bad = bazel.build(
            cluster.port, f"--remote_header=authorization=Bearer {TOKEN}", target="//fail:bad"
        )
        assert bad.returncode != 0
        assert "boom-from-the-worker" in bad.stderr and "Exit 3" in bad.stderr, bad.stderr[-2000:]
    finally:
        cluster.stop()
