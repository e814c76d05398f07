"""`rbs cas get` and `rbs cas verify` with a corrupt blob in the store, as subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(120), pytest.mark.chaos]


def rbs(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RBS_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def blob_path(home: Path, digest: str) -> Path:
    fn, _, rest = digest.partition(":")
    h = rest.partition("/")[0]
    return home / "cas" / "blobs" / fn / h[:2] / h


def flip_byte(path: Path, at: int) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    os.chmod(path, 0o444)


@pytest.mark.parametrize("size", [10, (5 << 20) + 1])
def test_get_of_a_corrupt_blob_is_a_clear_error_and_leaves_no_file(
    tmp_path: Path, size: int
) -> None:
    home = tmp_path / "home"
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(size))
    r = rbs(home, "cas", "put", str(src))
    assert r.returncode == 0, r.stderr
    digest = r.stdout.strip()
    flip_byte(blob_path(home, digest), size - 1)
    out = tmp_path / "out"
    out.mkdir()
    r = rbs(home, "cas", "get", digest, "-o", str(out / "got.bin"))
    assert r.returncode == 1, r.stderr
    assert digest in r.stderr and "corrupt" in r.stderr and "removed" in r.stderr
    assert "Traceback" not in r.stderr
    assert list(out.iterdir()) == []
    assert not blob_path(home, digest).exists()


def test_get_to_stdout_of_a_corrupt_blob_prints_no_byte(tmp_path: Path) -> None:
    home = tmp_path / "home"
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom((2 << 20) + 5))
    digest = rbs(home, "cas", "put", str(src)).stdout.strip()
    flip_byte(blob_path(home, digest), 1 << 20)
    r = rbs(home, "cas", "get", digest)
    assert r.returncode == 1 and r.stdout == ""
    assert "corrupt" in r.stderr and "Traceback" not in r.stderr


def test_verify_reports_counts_and_removes_corrupt_blobs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    digests = []
    for i in range(4):
        src = tmp_path / f"f{i}"
        src.write_bytes(f"blob number {i}".encode())
        digests.append(rbs(home, "cas", "put", str(src)).stdout.strip())
    flip_byte(blob_path(home, digests[1]), 0)
    r = rbs(home, "cas", "verify", "--json")
    assert r.returncode == 1, r.stderr  # corrupt blobs found: a scrub that fails
    doc = json.loads(r.stdout)
    assert (doc["checked"], doc["ok"], doc["removed"]) == (4, 3, 1)
    assert doc["corrupt"] == [digests[1]]
    assert not blob_path(home, digests[1]).exists()
    r = rbs(home, "cas", "--store", str(home / "cas"), "verify")
    assert r.returncode == 0, r.stderr
    assert "checked 3 blobs: 3 ok, 0 removed" in r.stdout
