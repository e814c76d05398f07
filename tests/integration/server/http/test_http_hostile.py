"""Hostile clients of the jobs API each get a precise answer, and the server keeps serving.

Deep JSON, huge bodies, slow senders, idle floods, out-of-range values and NUL bytes:
every one is a 4xx (or a close) naming what was wrong, while a normal request from
another client succeeds meanwhile. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobs_harness import JobCluster

from rbs.server.config import Config
from rbs.server.edge_config import HttpConfig

LIMITS = HttpConfig(
    max_connections=40,
    max_connections_per_client=20,
    header_timeout=1.0,
    idle_timeout=2.0,
    body_timeout=1.0,
    max_json_body=1 << 20,
    max_json_depth=32,
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JobCluster]:
    c = JobCluster(tmp_path / "server", serve=False)
    c.config = Config(server=c.config.server, jobs=c.config.jobs, http=LIMITS)
    c.start_server()
    c.config = Config(server=c.config.server, jobs=c.config.jobs, http=LIMITS)
    try:
        yield c
    finally:
        c.stop()


def post(port: int, path: str, body: bytes, source: str = "127.0.0.1") -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data else None
    finally:
        conn.close()


def get(port: int, path: str, source: str = "127.0.0.1") -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def submit(port: int, flags: dict[str, Any], command: list[str] | None = None) -> tuple[int, Any]:
    body = {"command": command or ["true"], "flags": flags, "input_root": None}
    return post(port, "/v1/jobs", json.dumps(body).encode())


def read_all(s: socket.socket, deadline_s: float = 30.0) -> bytes:
    """What the server sends until it closes the connection (bounded in time)."""
    s.settimeout(deadline_s)
    out = b""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def test_a_100k_deep_json_body_is_400_naming_the_depth(cluster: JobCluster) -> None:
    port = cluster.port + 1
    status, doc = post(port, "/v1/jobs", b"[" * 100_000 + b"]" * 100_000)
    assert status == 400
    assert "nests 100000 levels deep" in doc["error"]["message"]
    assert get(port, "/v1/status")[0] == 200


def test_a_body_over_the_limit_is_413(cluster: JobCluster) -> None:
    port = cluster.port + 1
    status, doc = post(port, "/v1/jobs", b" " * (LIMITS.max_json_body + 1))
    assert status == 413
    assert doc["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert str(LIMITS.max_json_body) in doc["error"]["message"]


@pytest.mark.parametrize(
    ("flags", "command", "names"),
    [
        ({"--env": 5}, None, "--env"),
        ({"--priority": "100000000000000000000000"}, None, "from -1000000 to 1000000"),
        ({"--max-retries": 10**20}, None, "from 0 to 1000"),
        ({"--time": "99999999999999999d"}, None, "from 1s to 366d"),
        ({"--name": "a\u0000b"}, None, "NUL"),
        ({"--env": ["A=x\u0000y"]}, None, "NUL"),
        ({}, ["echo", "a\u0000b"], "NUL"),
    ],
)
def test_out_of_range_values_and_nul_bytes_are_400_naming_the_field(
    cluster: JobCluster, flags: dict[str, Any], command: list[str] | None, names: str
) -> None:
    status, doc = submit(cluster.port + 1, flags, command)
    assert status == 400, doc
    assert doc["error"]["code"] == "INVALID_ARGUMENT"
    assert names in doc["error"]["message"]


def test_a_manifest_over_http_keeps_the_same_limits(cluster: JobCluster) -> None:
    body = {"manifest": {"command": ["true"], "priority": 10**23}, "provenance": {}}
    status, doc = post(cluster.port + 1, "/v1/jobs", json.dumps(body).encode())
    assert status == 400
    assert "manifest priority" in doc["error"]["message"]


def test_a_slow_request_head_is_cut_off_with_408(cluster: JobCluster) -> None:
    port = cluster.port + 1
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        # Another client is served while this one dawdles.
        assert get(port, "/v1/status")[0] == 200
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request head did not arrive" in answer


def test_a_slow_json_body_is_cut_off_with_408(cluster: JobCluster) -> None:
    port = cluster.port + 1
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        assert get(port, "/v1/status")[0] == 200
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"request body did not arrive" in answer


def test_an_idle_flood_is_capped_and_others_are_served(cluster: JobCluster) -> None:
    port = cluster.port + 1
    with contextlib.ExitStack() as stack:
        flood = []
        for _ in range(LIMITS.max_connections_per_client):
            s = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
            flood.append(s)
        # One more from the same address is refused at once, with a reason.
        extra = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
        answer = read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503 ")
        assert b"max_connections_per_client" in answer
        # Another client (127.0.0.2 is loopback too) is served meanwhile.
        assert get(port, "/v1/status", source="127.0.0.2")[0] == 200
        # The idle ones are closed by the server after idle_timeout.
        for s in flood:
            assert read_all(s) == b""
    # Once they are gone, the first address is served again.
    assert get(port, "/v1/status")[0] == 200


def test_a_server_bug_is_a_json_500_and_the_server_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rbs.server.jobs_http import JobsApi

    async def broken(self: JobsApi, request: Any) -> Any:
        raise RuntimeError("a bug in a handler")

    monkeypatch.setattr(JobsApi, "queues", broken)
    c = JobCluster(tmp_path / "server")
    try:
        status, doc = get(c.port + 1, "/v1/queues")
        assert status == 500
        assert doc["error"]["code"] == "INTERNAL"
        assert "a bug" not in doc["error"]["message"]  # the details stay in the server's log
        assert get(c.port + 1, "/v1/status")[0] == 200
    finally:
        c.stop()


def test_a_stalled_blob_upload_is_cut_off_with_408_and_nothing_is_stored(
    cluster: JobCluster,
) -> None:
    from rbs.model import Digest
    from rbs.wire.jobs_api_requests import blob_path

    port = cluster.port + 1
    data = b"y" * 100
    d = Digest.of(data)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            f"PUT {blob_path(d)} HTTP/1.1\r\nHost: x\r\nContent-Length: {d.size}\r\n\r\n".encode()
            + data[:10]
        )
        assert get(port, "/v1/status")[0] == 200
        answer = read_all(s)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"stalled" in answer
    assert cluster.server is not None
    assert not cluster.server.parts.store.contains(d)


def test_refused_connections_are_logged_at_a_bounded_rate(
    cluster: JobCluster, caplog: pytest.LogCaptureFixture
) -> None:
    port = cluster.port + 1
    caplog.set_level("WARNING")
    with contextlib.ExitStack() as stack:
        for _ in range(LIMITS.max_connections_per_client):
            stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=30))
        for _ in range(30):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                assert read_all(s).startswith(b"HTTP/1.1 503 ")
    lines = [r for r in caplog.records if "refused a connection" in r.getMessage()]
    assert 1 <= len(lines) <= 10
