"""Run real Bazel in one workspace with its own output root, for the interop tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BAZEL = shutil.which("bazel")


class BazelRunner:
    """Bazel in `ws` with a private output root and HOME; call `shutdown` when done,
    or its server lingers for hours."""

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

    def shutdown(self) -> None:
        self.run("shutdown", timeout=60)
