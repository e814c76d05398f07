"""`rbs remote serve` plus `rbs remote worker` as subprocesses, for the e2e tests."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Cluster:
    """`rbs remote serve` and one `rbs remote worker`, as subprocesses of this test."""

    root: Path
    token: str | None = None
    procs: list[subprocess.Popen[str]] = field(default_factory=list)
    port: int = 0
    server_args: tuple[str, ...] = ()  # e.g. ("--digest-function", "sha256")
    build_slots: int = 4

    def start(self) -> Cluster:
        extra: list[str] = list(self.server_args)
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
                str(self.build_slots),
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
