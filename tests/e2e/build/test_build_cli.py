"""The `rbs build/run/test/query/clean` commands on a copy of examples/WORKSPACE."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "WORKSPACE"


def rbs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    dest = tmp_path / "ws"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("rbs-out", ".rbs"))
    return dest


def test_build_run_query_clean(ws: Path) -> None:
    r = rbs(ws, "build", "//greet/...", "-j", "2")
    assert r.returncode == 0, r.stderr
    assert (
        ws / "rbs-out/bin/greet/banner.txt"
    ).read_text() == "== greetings ==\nHELLO\nBONJOUR\nHOLA\n"
    assert "Target //greet:count up-to-date:" in r.stderr
    again = rbs(ws / "greet", "build", "//greet/...")
    assert again.returncode == 0 and "up to date" in again.stderr
    # A no-op is answered before click, Starlark or the store are imported.
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rbs", "build", "-j", "2", "//greet/..."],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = {
        line.rsplit("|", 1)[-1].strip() for line in timed.stderr.splitlines() if "|" in line
    }
    assert "up to date" in timed.stderr and not imported & {"click", "starlark", "rbs.cas.disk"}
    run = rbs(ws, "run", "//greet:hello", "--", "Ada")
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("(3 words)\nHello, Ada!\n")
    build_file = ws / "greet/BUILD"
    build_file.write_text(
        build_file.read_text().replace(
            'deps = [":greeting"],\n    data',
            'deps = [":greeting"],\n    args = ["Grace"],\n    data',
            1,
        )
    )
    run2 = rbs(ws, "run", "//greet:hello", "--", "Ada")
    assert run2.stdout.endswith("Hello, Grace!\nHello, Ada!\n"), run2.stdout + run2.stderr
    q = rbs(ws, "query", "deps(//greet:count)")
    assert q.stdout.split() == [
        "//greet:count",
        "//greet:upper",
        "//greet:upper.txt",
        "//greet:words.txt",
    ]
    assert rbs(ws, "query", "//greet/...").stdout.count("\n") == 7
    assert rbs(ws, "clean").returncode == 0 and not (ws / "rbs-out").exists()


def test_test_command_summarizes_and_fails(ws: Path) -> None:
    r = rbs(ws, "test", "//greet/...")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "//greet:count_test  PASSED" in r.stdout and "2 passed, 0 failed" in r.stdout
    (ws / "greet/words.txt").write_text("just one\n")
    bad = rbs(ws, "test", "//greet:all")
    assert bad.returncode == 3
    assert (
        "//greet:count_test  FAILED" in bad.stdout
        and "//greet:greeting_test  (cached) PASSED" in bad.stdout
    )


def test_user_errors_are_one_clear_message(ws: Path) -> None:
    (ws / "greet/BUILD").write_text(
        (ws / "greet/BUILD").read_text().replace('srcs = ["words.txt"]', 'srcs = ["word.txt"]')
    )
    r = rbs(ws, "build", "//greet:count")
    assert r.returncode == 1
    assert "greet/BUILD:4:1: error:" in r.stderr and "did you mean //greet:words.txt?" in r.stderr
    assert "Traceback" not in r.stderr
    r2 = rbs(ws, "build", "//nope:x")
    assert (
        r2.returncode == 1
        and "no such package //nope" in r2.stderr
        and "Traceback" not in r2.stderr
    )
    r3 = rbs(ws.parent, "build", "//greet/...")
    assert r3.returncode == 1 and "no WORKSPACE" in r3.stderr


GENRULES = {
    "pkg/in.txt": "one\ntwo\n",
    "pkg/BUILD": (
        'genrule(name = "a", srcs = ["in.txt"], outs = ["a.txt"],\n'
        '        cmd = "cat $< > $@; echo $@ $< $(RULEDIR) $(@D) $(SRCS) $(OUTS) $(location in.txt) >> $@")\n'
        'genrule(name = "b", srcs = [":a.txt", "in.txt"], outs = ["b1.txt", "b2.txt"],\n'
        '        cmd = "echo $(SRCS) $(@D) $(locations :a.txt) $(execpath :a.txt) $(rootpath :a.txt) > $(location b1.txt); '
        'sort $(SRCS) | uniq -c > $(location b2.txt)")\n'
        'filegroup(name = "fg", srcs = [":b", "in.txt"])\n'
        'genrule(name = "c", srcs = [":fg", "//lib:l"], outs = ["c.txt"],\n'
        "        cmd = \"ls $(SRCS) > $@; pwd | sed 's|.*/execroot/||' >> $@; echo $(BINDIR) $(GENDIR) $(COMPILATION_MODE) >> $@\")\n"
    ),
    "lib/BUILD": 'genrule(name = "l", outs = ["l.txt"], cmd = "echo lib > $@", visibility = ["//visibility:public"])\n',
}


@pytest.mark.bazel
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_genrule_outputs_are_byte_identical_to_bazels(tmp_path: Path) -> None:
    bazel = shutil.which("bazel")
    if bazel is None:
        pytest.skip("bazel is not installed (make test installs Debian's bazel-bootstrap)")
    ws = tmp_path / "ws"
    for rel, text in {**GENRULES, "WORKSPACE": "", ".bazelrc": "build --nosandbox_debug\n"}.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    root = ["--output_user_root", str(tmp_path / "bazel-root")]
    try:
        res = subprocess.run(
            [
                bazel,
                *root,
                "build",
                "--experimental_repository_disable_download",
                "--incompatible_strict_action_env",
                "//...",
            ],
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
        assert res.returncode == 0, res.stderr[-3000:]
        bazel_bin = Path(
            subprocess.run(
                [bazel, *root, "info", "bazel-bin"],
                cwd=ws,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
    finally:
        subprocess.run(
            [bazel, *root, "shutdown"], cwd=ws, capture_output=True, timeout=120, check=False
        )
    r = rbs(ws, "build", "//...")
    assert r.returncode == 0, r.stderr
    for rel in ("pkg/a.txt", "pkg/b1.txt", "pkg/b2.txt", "pkg/c.txt", "lib/l.txt"):
        assert (ws / "rbs-out/bin" / rel).read_bytes() == (bazel_bin / rel).read_bytes(), rel


def test_ctrl_c_stops_running_actions(tmp_path: Path) -> None:
    import os
    import select
    import signal

    ws = tmp_path / "ws"
    (ws / "p").mkdir(parents=True)
    (ws / "WORKSPACE").touch()
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    (ws / "p/BUILD").write_text(
        f'genrule(name = "slow", outs = ["o"], cmd = "echo $$$$ > {fifo}; exec sleep 300")\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rbs", "build", "//p:slow", "--plain"],
        cwd=ws,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "the action never started"
            pid = int(os.read(fd, 100).decode().strip())
        finally:
            os.close(fd)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    state = subprocess.run(
        ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True
    ).stdout.strip()
    assert state in ("", "Z"), f"the action's process {pid} still runs ({state})"
