"""A job's output blob corrupted in the server's CAS: 404 over the jobs API, and `rbs job
outputs` fails at once with one line, leaving nothing behind (embedded local cluster)."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded import EmbeddedCluster

from rbs.client.http import ConnectError, HttpConnection, HttpError
from rbs.model import Digest
from rbs.wire.jobs_api_requests import blob_path

pytestmark = [pytest.mark.timeout(240), pytest.mark.chaos]
DATA = b"precious output\n" * 200_000  # 3.2 MB: more than one chunk on the wire

CLUSTER = EmbeddedCluster()
rbs = CLUSTER.rbs


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


def flip_byte(path: Path, at: int) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    os.chmod(path, 0o444)


def _server_info(home: Path) -> dict[str, object]:
    info: dict[str, object] = json.loads((home / "local" / "server.ready").read_text())
    return info


def _job_with_output(home: Path, tmp_path: Path) -> tuple[str, Digest]:
    script = "yes 'precious output' | head -n 200000 > o.txt"
    r = rbs(home, "job", "submit", "--outputs", "o.txt", "--", "sh", "-c", script, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    r = rbs(home, "job", "wait", job, "--timeout", "90")
    assert (r.returncode, r.stdout.split()) == (0, [job, "COMPLETED"]), r.stderr
    return job, Digest.of(DATA)


def test_corrupt_output_blob(home: Path, tmp_path: Path) -> None:
    job, d = _job_with_output(home, tmp_path)
    info = _server_info(home)
    blob = Path(str(info["data_dir"])) / "cas" / "blobs" / d.function.value / d.hash[:2] / d.hash
    assert blob.exists()

    # A good download first, so the server has verified (and remembered) the blob.
    good = tmp_path / "good"
    r = rbs(home, "job", "outputs", job, "--dest", str(good))
    assert r.returncode == 0, r.stderr
    assert (good / "o.txt").read_bytes() == DATA

    flip_byte(blob, len(DATA) - 1)
    corrupt = blob.read_bytes()

    # `rbs job outputs`: one clear line, quickly, and no partial file or tree.
    dest = tmp_path / "dl"
    t0 = time.monotonic()
    r = rbs(home, "job", "outputs", job, "--dest", str(dest))
    assert time.monotonic() - t0 < 30
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert str(d) in r.stderr and "corrupt" in r.stderr, r.stderr
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir() if "dl" in p.name] == []
    assert not blob.exists()

    # The jobs API: 404 with a JSON error, nothing sent before the check.
    blob.write_bytes(corrupt)
    blob.chmod(0o444)
    conn = HttpConnection("127.0.0.1", int(str(info["http_port"])), timeout=30)
    try:
        with pytest.raises(HttpError) as e:
            conn.request("GET", blob_path(d))
        assert e.value.status == 404 and e.value.code == "NOT_FOUND"
        assert str(d) in e.value.message and "corrupt" in e.value.message
        # The connection stays usable: the error answer was whole.
        with pytest.raises(HttpError) as e:
            conn.request("GET", blob_path(d))
        assert e.value.status == 404
    finally:
        conn.close()
    assert not blob.exists()


def test_a_body_cut_short_fails_at_once(tmp_path: Path) -> None:
    """A server that promises more bytes than it sends, then closes: a clear error from
    the client at once, not a short body taken as whole or a wait for the timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 10)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    conn = HttpConnection("127.0.0.1", port, timeout=60)
    t0 = time.monotonic()
    try:
        with pytest.raises(ConnectError, match="closed the connection mid-response"):
            conn.request("GET", "/v1/cas/blobs/x")
    finally:
        conn.close()
        listener.close()
    assert time.monotonic() - t0 < 10
    t.join(timeout=10)
