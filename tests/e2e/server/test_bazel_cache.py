"""Real Bazel (Debian's bazel-bootstrap 4.2) against `rbs remote serve` as its remote cache."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from bazel_runner import BAZEL, BazelRunner

pytestmark = [
    pytest.mark.bazel,
    pytest.mark.skipif(
        BAZEL is None, reason="bazel is not installed (make test installs bazel-bootstrap)"
    ),
]

TOKEN = "s3cret-test-token"
GENRULES = 4


@dataclass
class Server:
    proc: subprocess.Popen[str]
    port: int


def _start_server(tmp: Path, *extra: str) -> Server:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rbs", "remote", "serve", "--port", "0"),
            *("--data-dir", str(tmp / "server"), "--log-level", "warning", *extra),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # The server prints one line once it accepts calls; wait for it, bounded.
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    m = re.search(r"serving on [\d.]+:(\d+)", line)
    if not m:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"server did not start: {line!r} {err}")
    return Server(proc=proc, port=int(m[1]))


def _stop_server(server: Server) -> None:
    server.proc.send_signal(signal.SIGTERM)
    try:
        rc = server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=10)
        pytest.fail("server did not stop within 20 s of SIGTERM")
    assert rc == 0, (
        f"server exited with {rc}: {server.proc.stderr.read() if server.proc.stderr else ''}"
    )


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / ".bazelrc").write_text("build --nosandbox_debug\n")
    rules = ['genrule(name = "g0", outs = ["g0.txt"], cmd = "echo seed > $@")']
    for i in range(1, GENRULES):
        rules.append(
            f'genrule(name = "g{i}", srcs = [":g{i - 1}"], outs = ["g{i}.txt"], '
            f'cmd = "cat $< > $@ && echo step{i} >> $@")'
        )
    (ws / "BUILD").write_text("\n".join(rules) + "\n")
    return ws


class Bazel(BazelRunner):
    """Bazel against the rbs server under test."""

    def build(self, port: int, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.run(
            "build",
            f"--remote_cache=grpc://127.0.0.1:{port}",
            "--experimental_repository_disable_download",
            "--incompatible_strict_action_env",
            "--spawn_strategy=local",
            *flags,
            "//...",
        )


@pytest.fixture
def bazel(tmp_path: Path) -> Iterator[Bazel]:
    b = Bazel(_workspace(tmp_path), tmp_path)
    try:
        yield b
    finally:
        b.shutdown()


def _processes(output: str) -> str:
    m = re.search(r"INFO: (\d+ process.*)", output)
    return m[1] if m else ""


def _cache_hits(output: str) -> int:
    m = re.search(r"(\d+) remote cache hit", output)
    return int(m[1]) if m else 0


@pytest.mark.timeout(300)
def test_clean_rebuild_is_all_remote_cache_hits(bazel: Bazel, tmp_path: Path) -> None:
    server = _start_server(tmp_path)
    try:
        first = bazel.build(server.port)
        assert first.returncode == 0, first.stderr
        assert _cache_hits(first.stderr) == 0, _processes(first.stderr)
        assert bazel.run("clean").returncode == 0
        second = bazel.build(server.port)
        assert second.returncode == 0, second.stderr
        assert _cache_hits(second.stderr) == GENRULES, _processes(second.stderr)
        out = (bazel.ws / "bazel-bin" / f"g{GENRULES - 1}.txt").read_text()
        assert out.splitlines() == ["seed", *(f"step{i}" for i in range(1, GENRULES))]
        # An instance name the server does not serve fails the build with the reason.
        wrong = bazel.build(server.port, "--remote_instance_name=nope")
        assert wrong.returncode != 0
        assert "unknown instance name 'nope'" in wrong.stderr, wrong.stderr[-2000:]
    finally:
        _stop_server(server)


@pytest.mark.timeout(300)
def test_token_required_and_accepted(bazel: Bazel, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = _start_server(tmp_path, "--token-file", str(token_file))
    try:
        started = time.monotonic()
        refused = bazel.build(server.port)
        assert refused.returncode != 0
        assert "UNAUTHENTICATED" in refused.stderr, refused.stderr[-2000:]
        assert time.monotonic() - started < 120
        wrong = bazel.build(server.port, "--remote_header=authorization=Bearer nope")
        assert wrong.returncode != 0
        assert "UNAUTHENTICATED" in wrong.stderr
        header = f"--remote_header=authorization=Bearer {TOKEN}"
        ok = bazel.build(server.port, header)
        assert ok.returncode == 0, ok.stderr
        assert bazel.run("clean").returncode == 0
        again = bazel.build(server.port, header)
        assert again.returncode == 0, again.stderr
        assert _cache_hits(again.stderr) == GENRULES, _processes(again.stderr)
    finally:
        _stop_server(server)
    # The token never appears in the server's log.
    assert server.proc.stderr is not None
    assert TOKEN not in server.proc.stderr.read()
