"""Real Bazel (Debian's bazel-bootstrap 4.2) executing every action on an rbs worker."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BAZEL = shutil.which("bazel")
pytestmark = [
    pytest.mark.bazel,
    pytest.mark.skipif(
        BAZEL is None, reason="bazel is not installed (make test installs bazel-bootstrap)"
    ),
]

TOKEN = "exec-test-token"
CHAIN = 4


@dataclass
class Cluster:
    """`rbs remote serve` and one `rbs remote worker`, as subprocesses of this test."""

    root: Path
    token: str | None = None
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    port: int = 0

    def start(self) -> Cluster:
        extra: list[str] = []
        env = dict(os.environ)
        if self.token:
            (self.root / "token").write_text(self.token + "\n")
            extra = ["--token-file", str(self.root / "token")]
            env["RBS_REMOTE_TOKEN"] = self.token
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rbs",
                "remote",
                "serve",
                "--port",
                "0",
                "--data-dir",
                str(self.root / "server"),
                "--log-level",
                "warning",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(server)
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 30)
        line = server.stdout.readline() if ready else ""
        m = re.search(r"serving on [\d.]+:(\d+)", line)
        if not m:
            self.stop()
            pytest.fail(f"server did not start: {line!r}")
        self.port = int(m[1])
        ready_file = self.root / "worker.ready"
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rbs",
                "remote",
                "worker",
                "--server",
                f"127.0.0.1:{self.port}",
                "--work-dir",
                str(self.root / "worker"),
                "--build-slots",
                "4",
                "--ready-file",
                str(ready_file),
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.procs.append(worker)
        deadline = time.monotonic() + 30
        while not ready_file.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail("worker did not register within 30 s")
            time.sleep(0.02)
        json.loads(ready_file.read_text())
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()


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
    return ws


class Bazel:
    """Runs bazel in one workspace with its own output root; always shut down after."""

    def __init__(self, ws: Path, root: Path) -> None:
        self.ws = ws
        self.startup = [f"--output_user_root={root / 'bazel-root'}", "--max_idle_secs=120"]
        self.env = {**os.environ, "HOME": str(root / "home")}
        (root / "home").mkdir(exist_ok=True)

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        assert BAZEL is not None
        return subprocess.run(
            [BAZEL, *self.startup, *args],
            cwd=self.ws,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def build(self, port: int, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.run(
            "build",
            f"--remote_executor=grpc://127.0.0.1:{port}",
            "--experimental_repository_disable_download",
            "--incompatible_strict_action_env",
            "--jobs=16",
            *flags,
            "//...",
        )

    def shutdown(self) -> None:
        self.run("shutdown", timeout=60)


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
    finally:
        cluster.stop()
