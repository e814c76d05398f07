"""Real Bazel (4.2) streaming its invocations to `rbs remote serve`'s Build Event Service,
and the dashboard's Invocations pages showing them."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path

import pytest
from bazel_runner import BAZEL, BazelRunner

pytestmark = [
    pytest.mark.bazel,
    pytest.mark.skipif(
        BAZEL is None, reason="bazel is not installed (make test installs bazel-bootstrap)"
    ),
]

# A Starlark test rule: Debian's Bazel 4.2 cannot analyse sh_test offline (its launcher
# needs rules_cc and rules_java); a test rule needs only @remote_coverage_tools, stubbed.
DEFS = """
def _script_test_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(out, ctx.attr.script, is_executable = True)
    return [DefaultInfo(executable = out)]

script_test = rule(
    implementation = _script_test_impl,
    attrs = {"script": attr.string()},
    test = True,
)
"""
COVERAGE_STUB = """
filegroup(name = "coverage_report_generator", visibility = ["//visibility:public"])
filegroup(name = "lcov_merger", visibility = ["//visibility:public"])
"""
BUILD = """
load(":defs.bzl", "script_test")
genrule(name = "good", outs = ["good.txt"], cmd = "echo fine > $@")
genrule(
    name = "bad",
    outs = ["bad.txt"],
    cmd = "echo the-bad-rule-broke >&2; exit 3",
)
script_test(name = "check", script = "#!/bin/sh\\necho checking\\n")
"""


@dataclass
class Server:
    proc: subprocess.Popen[str]
    port: int
    http: int


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
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
        yield Server(proc=proc, port=int(m[1]), http=int(m[2]))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def bazel(tmp_path: Path) -> Iterator[BazelRunner]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "WORKSPACE").write_text("")
    (ws / "BUILD").write_text(BUILD)
    (ws / "defs.bzl").write_text(DEFS)
    cov = tmp_path / "coverage_stub"
    cov.mkdir()
    (cov / "WORKSPACE").write_text("")
    (cov / "BUILD").write_text(COVERAGE_STUB)
    (ws / ".bazelrc").write_text(f"common --override_repository=remote_coverage_tools={cov}\n")
    b = BazelRunner(ws, tmp_path)
    try:
        yield b
    finally:
        b.shutdown()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return str(r.read().decode())


def _part(pattern: str, page: str) -> str:
    m = re.search(pattern, page, re.S)
    assert m, f"no {pattern!r} in the page:\n{page}"
    return m[0]


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", html))


@pytest.mark.timeout(600)
def test_bazel_invocation_is_recorded_and_shown(server: Server, bazel: BazelRunner) -> None:
    flags = (
        f"--bes_backend=grpc://127.0.0.1:{server.port}",
        f"--bes_results_url=http://127.0.0.1:{server.http}/ui/invocation/",
        f"--remote_cache=grpc://127.0.0.1:{server.port}",
        "--experimental_repository_disable_download",
        "--spawn_strategy=local",
        "--keep_going",
    )
    r = bazel.run("test", *flags, "//:good", "//:bad", "//:check")
    assert r.returncode != 0, r.stderr  # //:bad fails
    m = re.search(rf"http://127\.0\.0\.1:{server.http}/ui/invocation/([0-9a-f-]{{36}})", r.stderr)
    assert m, f"bazel printed no results URL:\n{r.stderr}"
    inv_id = m[1]

    # Bazel waits for the stream's acknowledgement before it exits, so the record is whole.
    page = _get(f"http://127.0.0.1:{server.http}/ui/invocation/{inv_id}")
    text = _text(page)
    assert "test" in text and "//:good //:bad //:check" in text
    assert "--keep_going" in text  # the full command line
    failure = _part(r'<section class="failure">.*?</section>', page)
    assert "//:bad" in failure and "Genrule" in failure
    assert '<pre class="stderr">' in failure and "the-bad-rule-broke" in failure
    tests = _part(r'<table id="tests">.*?</table>', page)
    assert "//:check" in tests and "PASSED" in tests
    targets = " ".join(_text(_part(r'<table id="targets">.*?</table>', page)).split())
    assert "//:good built" in targets and "//:bad failed" in targets
    assert "BUILD_FAILURE (1)" in text, text
    assert "http://" not in page.replace(f"http://127.0.0.1:{server.http}", "")  # no outside URL

    listing = _get(f"http://127.0.0.1:{server.http}/ui/invocations")
    assert inv_id in listing and "1/1 passed" in listing


@pytest.mark.timeout(600)
def test_a_passing_build_records_exit_code_zero(server: Server, bazel: BazelRunner) -> None:
    r = bazel.run(
        "build",
        f"--bes_backend=grpc://127.0.0.1:{server.port}",
        f"--bes_results_url=http://127.0.0.1:{server.http}/ui/invocation/",
        "--experimental_repository_disable_download",
        "--spawn_strategy=local",
        "//:good",
    )
    assert r.returncode == 0, r.stderr
    m = re.search(r"/ui/invocation/([0-9a-f-]{36})", r.stderr)
    assert m, r.stderr
    text = _text(_get(f"http://127.0.0.1:{server.http}/ui/invocation/{m[1]}"))
    assert "SUCCESS (0)" in text and "No action failed." in text
