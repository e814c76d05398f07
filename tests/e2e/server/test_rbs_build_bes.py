"""`rbs build` and `rbs test` record their own invocations on a server's Build Event
Service (--bes-backend), shown on the dashboard's Invocations pages as Bazel's are."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest

BUILD = """
genrule(name = "good", outs = ["good.txt"], cmd = "echo fine > $@")
genrule(name = "bad", outs = ["bad.txt"], cmd = "echo rbs-bad-rule-broke >&2; exit 3")
sh_test(name = "check", srcs = ["check.sh"])
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "rbs", "remote", "serve", "--port", "0"),
            *("--data-dir", str(tmp_path / "server"), "--log-level", "warning"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)  # one line once it serves
    line = proc.stdout.readline() if ready else ""
    m = re.search(r"serving on [\d.]+:(\d+) \(jobs API on port (\d+)", line)
    if not m:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"server did not start: {line!r} {err}")
    try:
        yield int(m[1]), int(m[2])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _rbs(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _page(http: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{http}{path}", timeout=30) as r:
        return str(r.read().decode())


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


@pytest.mark.timeout(600)
def test_rbs_build_and_test_record_their_invocations(
    server: tuple[int, int], tmp_path: Path
) -> None:
    port, http = server
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / "BUILD").write_text(BUILD)
    (ws / "check.sh").write_text("#!/bin/sh\necho checking\n")
    (ws / "check.sh").chmod(0o755)
    bes = f"--bes-backend=127.0.0.1:{port}"

    r = _rbs(ws, "build", "--keep-going", bes, "//:good", "//:bad")
    assert r.returncode == 1, r.stderr
    m = re.search(r"rbs: invocation ([0-9a-f-]{36}) recorded on", r.stderr)
    assert m, r.stderr
    page = _page(http, f"/ui/invocation/{m[1]}")
    text = _text(page)
    assert "rbs " in text and "//:good //:bad" in text and "FAILED (1)" in text
    failure = re.search(r'<section class="failure">.*?</section>', page, re.S)
    assert failure and "//:bad" in failure[0] and "rbs-bad-rule-broke" in failure[0]

    r = _rbs(ws, "test", bes, "//:check")
    assert r.returncode == 0, r.stderr
    m = re.search(r"rbs: invocation ([0-9a-f-]{36}) recorded on", r.stderr)
    assert m, r.stderr
    text = _text(_page(http, f"/ui/invocation/{m[1]}"))
    assert "SUCCESS (0)" in text and "//:check PASSED" in text

    listing = _page(http, "/ui/invocations")
    assert listing.count("/ui/invocation/") == 2 and "1/1 passed" in listing


def test_an_unreachable_bes_backend_is_a_warning(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / "BUILD").write_text(
        'genrule(name = "good", outs = ["good.txt"], cmd = "echo fine > $@")\n'
    )
    r = _rbs(ws, "build", "--bes-backend=127.0.0.1:1", "//:good")
    assert r.returncode == 0, r.stderr
    assert "rbs: warning: could not record the invocation on 127.0.0.1:1" in r.stderr
    assert "Traceback" not in r.stderr
