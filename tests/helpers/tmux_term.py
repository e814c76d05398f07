"""A real terminal for end-to-end tests: a tmux server of the test's own, one window."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

TMUX = shutil.which("tmux")


class Tmux:
    """One tmux server (its socket under the test's tmp), one window `t`, a bash in it."""

    def __init__(self, sock: Path, env: dict[str, str]) -> None:
        assert TMUX is not None
        self.base = [TMUX, "-S", str(sock), "-f", "/dev/null"]
        self.env = env

    def __call__(self, *args: str) -> str:
        r = subprocess.run(
            [*self.base, *args], env=self.env, capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout

    def start(self, cols: int = 100, rows: int = 30) -> None:
        self("new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(rows),
             "bash --norc --noprofile")  # fmt: skip

    def type(self, text: str, enter: bool = True) -> None:
        self("send-keys", "-t", "t", "-l", text)
        if enter:
            self("send-keys", "-t", "t", "Enter")

    def screen(self) -> str:
        return self("capture-pane", "-p", "-J", "-S", "-500", "-t", "t")

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        """Poll the screen (bounded) until `pattern` (a regex, per line) is on it."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.screen(), re.MULTILINE)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {pattern!r} on the screen:\n{self.screen()}")
            time.sleep(0.1)

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], env=self.env, capture_output=True, timeout=30)
