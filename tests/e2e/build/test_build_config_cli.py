"""`rbs build` with .bazelrc, --config, --define, select() and --keep-going, beside Bazel 4.2.3."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG_WS = Path(__file__).resolve().parents[2] / "fixtures" / "config_ws"
OUTPUTS = ("p/mode.out", "p/report.txt")


def rbs(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args, "--plain"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    dest = tmp_path / "config_ws"
    shutil.copytree(CONFIG_WS, dest)
    return dest


def test_bazelrc_configs_defines_and_unknown_flags(ws: Path) -> None:
    rc = ws / ".bazelrc"
    rc.write_text(rc.read_text() + "build --remote_download_minimal\n")
    r = rbs(ws, "build", "//...")
    assert r.returncode == 0, r.stderr
    assert (
        "config_ws/.bazelrc:4: ignoring --remote_download_minimal: not a flag rbs knows" in r.stderr
    )
    mode = ws / "rbs-out/bin/p/mode.out"
    assert mode.read_text() == "input\nfast input\nfast linux\n"
    assert not (ws / "rbs-out/bin/p/manual.out").exists()
    # A no-op is still answered before click is imported, with the rc file read.
    timed = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rbs", "build", "//..."],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "up to date" in timed.stderr and "| click" not in timed.stderr
    r = rbs(ws, "build", "--config=flavored", "//...")
    assert r.returncode == 0, r.stderr
    assert mode.read_text() == "input\nfast input\nfast-and-sweet linux\n"
    assert "//p:sugar sugar" in (ws / "rbs-out/bin/p/report.txt").read_text()
    # A --define on the command line comes after the rc file's, so it wins.
    r = rbs(ws, "build", "--define", "mode=slow", "//p:mode")
    assert r.returncode == 0, r.stderr
    assert mode.read_text() == "input\ndefault linux\n"
    r = rbs(ws, "build", "--config=nope", "//...")
    assert r.returncode != 0 and "--config=nope: no rc line defines it" in r.stderr
    assert "Traceback" not in r.stderr
    r = rbs(ws, "build", "//p:manual_only")
    assert r.returncode == 0 and (ws / "rbs-out/bin/p/manual.out").read_text() == "manual\n"


def test_keep_going_reports_a_broken_package_and_exits_non_zero(ws: Path) -> None:
    (ws / "broken").mkdir()
    (ws / "broken/BUILD").write_text('genrule(name = "x", outs = ["x"],\n    cmd = undefined)\n')
    r = rbs(ws, "build", "//...")
    assert (
        r.returncode == 1 and "broken/BUILD:2:11: error: Variable `undefined` not found" in r.stderr
    )
    assert not (ws / "rbs-out/bin/p/mode.out").exists()
    r = rbs(ws, "build", "--keep_going", "//...")
    assert r.returncode == 1, r.stderr
    assert "broken/BUILD:2:11: error: Variable `undefined` not found" in r.stderr
    assert "1 package(s) or target(s) failed to load or analyse" in r.stderr
    assert (ws / "rbs-out/bin/p/mode.out").read_text() == "input\nfast input\nfast linux\n"
    assert "Traceback" not in r.stderr


@pytest.mark.bazel
def test_outputs_are_byte_identical_to_bazels(ws: Path, tmp_path: Path) -> None:
    bazel = shutil.which("bazel")
    if bazel is None:
        pytest.skip("bazel is not installed (make test installs Debian's bazel-bootstrap)")
    root = ["--output_user_root", str(tmp_path / "bazel-root")]
    got: dict[tuple[str, str], bytes] = {}
    try:
        for config in ("", "--config=flavored"):
            args = [bazel, *root, "build", "--experimental_repository_disable_download"]
            res = subprocess.run(
                [*args, *([config] if config else []), "//..."],
                cwd=ws,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert res.returncode == 0, res.stderr[-3000:]
            bin_dir = subprocess.run(
                [bazel, *root, "info", "bazel-bin"],
                cwd=ws,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout.strip()
            for rel in OUTPUTS:
                got[config, rel] = (Path(bin_dir) / rel).read_bytes()
    finally:
        subprocess.run(
            [bazel, *root, "shutdown"], cwd=ws, capture_output=True, timeout=120, check=False
        )
    for config in ("", "--config=flavored"):
        r = rbs(ws, "build", *([config] if config else []), "//...")
        assert r.returncode == 0, r.stderr
        for rel in OUTPUTS:
            assert (ws / "rbs-out/bin" / rel).read_bytes() == got[config, rel], (config, rel)


def test_build_settings_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "WORKSPACE").touch()
    (tmp_path / "s").mkdir()
    (tmp_path / "s/BUILD").write_text(
        'load("@bazel_skylib//rules:common_settings.bzl", "string_flag")\n'
        'string_flag(name = "color", build_setting_default = "red")\n'
        'config_setting(name = "blue", flag_values = {":color": "blue"})\n'
        'genrule(name = "g", outs = ["g.txt"],\n'
        '    cmd = select({":blue": "echo blue > $@", "//conditions:default": "echo red > $@"}))\n'
    )
    out = tmp_path / "rbs-out/bin/s/g.txt"
    assert rbs(tmp_path, "build", "//s:g").returncode == 0 and out.read_text() == "red\n"
    r = rbs(tmp_path, "build", "--//s:color=blue", "//s:g")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "blue\n"
    r = rbs(tmp_path, "build", "--frobnicate", "//s:g")
    assert r.returncode == 2 and "No such option '--frobnicate'" in r.stderr


CONFIGURATIONS = Path(__file__).resolve().parents[2] / "fixtures" / "bazel_examples_configurations"
# (target, flags, the line its README says Bazel prints): reviewed expectations, since
# Bazel 4.2.3 cannot build these offline (bzlmod, @bazel_skylib).
README_RUNS = [
    ("//basic_build_setting:today", [], "HOT"),
    ("//basic_build_setting:today", ["--//basic_build_setting:coffee-temp=ICED"], "ICED"),
    ("//select_on_build_setting:harvest", [], "We're harvesting apples!"),
    (
        "//select_on_build_setting:harvest",
        ["--//select_on_build_setting:season=summer"],
        "We're harvesting cherries!",
    ),
    (
        "//select_on_build_setting:harvest",
        ["--//select_on_build_setting:season=fall"],
        "We're harvesting pumpkins!",
    ),
    ("//use_skylib_build_setting:ice-cream", [], "flavor: strawberry"),
    (
        "//use_skylib_build_setting:ice-cream",
        ["--//use_skylib_build_setting:flavor=rocky-road"],
        "flavor: rocky-road",
    ),
]


def test_bazel_examples_build_settings_print_what_their_readmes_say(tmp_path: Path) -> None:
    ws = tmp_path / "configurations"
    shutil.copytree(CONFIGURATIONS, ws)
    for target, flags, line in README_RUNS:
        r = rbs(ws, "build", *flags, target)
        assert r.returncode == 0, r.stderr
        assert line in r.stderr.splitlines(), (target, flags, r.stderr)
        assert "ignoring" not in r.stderr  # its .bazelrc has only --enable_bzlmod
