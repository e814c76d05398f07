"""`rbs cas` as an operator runs it: a subprocess per command, a store in RBS_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rbs import __version__


def rbs(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RBS_HOME": str(home)}
    r = subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"rbs {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def test_version_and_help(tmp_path: Path) -> None:
    assert rbs(tmp_path, "--version").stdout.strip().endswith(__version__)
    out = rbs(tmp_path, "--help").stdout
    assert "cas" in out
    for cmd in ("put", "get", "stat", "gc"):
        assert cmd in rbs(tmp_path, "cas", "--help").stdout


def test_put_get_file_and_tree_round_trip(tmp_path: Path) -> None:
    home = tmp_path / "home"
    src = tmp_path / "src"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "run").write_text("#!/bin/sh\necho hi\n")
    (src / "bin" / "run").chmod(0o755)
    (src / "data.txt").write_text("data")
    os.symlink("bin/run", src / "link")

    file_digest = rbs(home, "cas", "put", str(src / "data.txt")).stdout.strip()
    assert file_digest.startswith("blake3:") and file_digest.endswith("/4")
    assert rbs(home, "cas", "get", file_digest).stdout == "data"

    tree = rbs(home, "cas", "put", str(src)).stdout.strip()
    rbs(home, "cas", "get", tree, "-o", str(tmp_path / "out"))
    out = tmp_path / "out"
    assert (out / "data.txt").read_text() == "data"
    assert os.access(out / "bin" / "run", os.X_OK)
    assert os.readlink(out / "link") == "bin/run"
    assert (home / "cas" / "blobs").is_dir(), "the default store lives in $RBS_HOME/cas"

    sha = rbs(home, "cas", "--digest-function", "sha256", "put", str(src / "data.txt"))
    assert sha.stdout.startswith("sha256:")


def test_stat_and_gc(tmp_path: Path) -> None:
    store = tmp_path / "explicit-store"
    (tmp_path / "f").write_bytes(b"x" * 5000)
    rbs(tmp_path, "cas", "--store", str(store), "put", str(tmp_path / "f"))
    doc = json.loads(rbs(tmp_path, "cas", "--store", str(store), "stat", "--json").stdout)
    assert (doc["blobs"], doc["bytes"], doc["leased_blobs"]) == (1, 5000, 1)
    assert "blobs" in rbs(tmp_path, "cas", "--store", str(store), "stat").stdout

    kept = rbs(tmp_path, "cas", "--store", str(store), "gc", "--max-size", "1K")
    assert "removed 0 blobs" in kept.stdout and "in its lease" in kept.stderr
    gone = rbs(tmp_path, "cas", "--store", str(store), "gc", "--max-size", "1K", "--lease", "0s")
    assert "removed 1 blobs" in gone.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["get", "not-a-digest"], "malformed digest"),
        (["get", "blake3:" + "0" * 64 + "/3"], "is not in the store"),
        (["gc", "--max-size", "lots"], "is not a size"),
        (["gc", "--max-size", "1G", "--lease", "forever"], "is not a duration"),
        (["put", "/no/such/path"], "does not exist"),
    ],
)
def test_bad_input_gets_a_clear_error(tmp_path: Path, args: list[str], message: str) -> None:
    r = rbs(tmp_path, "cas", *args, check=False)
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_put_bundle_leaves_out_rbs_state(tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / ".rbs" / "cas").mkdir(parents=True)
    (src / ".rbs" / "cas" / "junk").write_text("state")
    (src / "main.py").write_text("print('hi')")
    tree = rbs(tmp_path / "home", "cas", "put", "--bundle", str(src)).stdout.strip()
    rbs(tmp_path / "home", "cas", "get", tree, "-o", str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["main.py"]
