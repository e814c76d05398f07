"""The wheel ships every package and the rule library, so an installed rbs works alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _copy_project(dest: Path) -> None:
    """The project's files (tracked and untracked-not-ignored), without build leftovers:
    a build/ folder in the work tree would let a stale copy of an unlisted package slip
    into the wheel and hide the omission."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        rel = name.decode()
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)


@pytest.mark.timeout(300)
def test_wheel_holds_every_package_and_the_rules(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "wheel"
    _copy_project(src)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = out.glob("rbs-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every Python package in the tree is listed in pyproject.toml (they are explicit).
    for init in ROOT.joinpath("rbs").rglob("__init__.py"):
        rel = init.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} is missing from the wheel: list its package in pyproject.toml"
    # The rule library resolves as @rbs//... from an installed copy.
    for rbs_file in ROOT.joinpath("rules").rglob("*.rbs"):
        rel = "rbs/rules/" + rbs_file.relative_to(ROOT / "rules").as_posix()
        assert rel in names, f"{rel} is missing from the wheel"
    # Starlark files read from inside the package (the build's prelude.rbs) ship too.
    for rbs_file in ROOT.joinpath("rbs").rglob("*.rbs"):
        rel = rbs_file.relative_to(ROOT).as_posix()
        assert rel in names, f"{rel} is missing from the wheel: list it in package-data"
    assert "rbs/build/prelude.rbs" in names
    # The `rbs` command is rbs's own launcher (bin/rbs), shipped as a script, not an entry point.
    assert any(n.endswith(".data/scripts/rbs") for n in names), sorted(names)[:20]
