"""`rbs cas put/get` of a big file draws a progress bar on a terminal, and nothing in a pipe."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ptyrun import PtyRbs, rbs_env

BIG = 40 << 20  # above the 32 MiB a bar waits for
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.bin"
    with open(path, "wb") as f:
        for _ in range(BIG >> 20):
            f.write(os.urandom(1 << 20))
    return path


def test_a_big_put_on_a_terminal_draws_a_bar_with_bytes_and_the_digest_goes_to_stdout(
    big: Path, tmp_path: Path
) -> None:
    rc, out, tty = PtyRbs(["cas", "put", str(big)], rbs_env(tmp_path)).finish()
    assert rc == 0, tty
    assert out.decode().strip().endswith(f"/{BIG}")  # stdout holds the digest alone
    text = tty.decode(errors="replace")
    assert "storing big.bin" in text
    assert "/41.9 MB" in text  # bytes done of the total, as rich writes them
    assert "━" in text  # the bar itself
    assert "41.9/41.9 MB" in text  # it reached the end
    assert "\x1b[?25h" in text and text.endswith("\x1b[2K")  # cursor back, line erased


def test_a_big_get_on_a_terminal_draws_a_bar_and_writes_the_same_bytes(
    big: Path, tmp_path: Path
) -> None:
    env = rbs_env(tmp_path)
    put = subprocess.run(
        [sys.executable, "-m", "rbs", "cas", "put", str(big)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    digest = put.stdout.strip()
    dest = tmp_path / "copy.bin"
    rc, _, tty = PtyRbs(["cas", "get", digest, "-o", str(dest)], env).finish()
    assert rc == 0, tty
    text = tty.decode(errors="replace")
    assert "writing copy.bin" in text and "/41.9 MB" in text
    assert dest.read_bytes() == big.read_bytes()


def test_a_big_put_into_a_pipe_draws_nothing(big: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rbs", "cas", "put", str(big)],
        env=rbs_env(tmp_path),
        capture_output=True,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == b""
    assert r.stdout.decode().strip().endswith(f"/{BIG}")
