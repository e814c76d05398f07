"""Input selection for job bundles: git-aware inside a work tree, everything elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rbs.cas.errors import CasError
from rbs.cas.inputs import select_inputs

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_SYSTEM": os.devnull,
    }
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=env, timeout=60)


def files(root: Path, *rels: str) -> None:
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(rel)


@needs_git
def test_git_work_tree_takes_tracked_and_unignored_untracked(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    files(repo, "tracked.py", "src/lib.py", "deleted.txt", ".gitignore", "build/out.o")
    (repo / ".gitignore").write_text("build/\n*.log\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "init")
    (repo / "deleted.txt").unlink()
    files(repo, "new.py", "debug.log", ".rbs/state", "src/.rbs/x")
    os.symlink("tracked.py", repo / "alias.py")
    assert select_inputs(repo) == [
        ".gitignore",
        "alias.py",
        "new.py",
        "src/lib.py",
        "tracked.py",
    ]
    # From a sub-folder, paths are relative to it.
    assert select_inputs(repo / "src") == ["lib.py"]


@needs_git
def test_submodules_are_expanded(tmp_path: Path) -> None:
    sub = tmp_path / "sub"
    files(sub, "inner.txt")
    git(sub, "init", "-q")
    git(sub, "add", ".")
    git(sub, "commit", "-qm", "sub")
    repo = tmp_path / "repo"
    files(repo, "top.txt")
    git(repo, "init", "-q")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "dep")
    assert select_inputs(repo) == [".gitmodules", "dep/inner.txt", "top.txt"]


def test_outside_git_everything_but_git_and_rbs_folders(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    files(root, "a.txt", "d/b.txt", ".git/config", ".rbs/cas/x", "d/.git/HEAD", ".hidden")
    (root / "empty").mkdir()
    os.symlink("/etc", root / "etc-link")
    env_git_dir = os.environ.pop("GIT_DIR", None)
    try:
        assert select_inputs(root) == [".hidden", "a.txt", "d/b.txt", "empty", "etc-link"]
    finally:
        if env_git_dir is not None:
            os.environ["GIT_DIR"] = env_git_dir


def test_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(CasError, match="not a folder"):
        select_inputs(tmp_path / "f")
