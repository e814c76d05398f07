"""Which files of a folder go into a job bundle: git-aware input selection.

In a git work tree the bundle is what git would consider part of the project: the
tracked files plus untracked files that are not ignored (`git ls-files --cached
--others --exclude-standard`); tracked files deleted from the work tree are left out
and submodules are expanded with their own rules. Elsewhere it is everything except
`.git` and `.rbs` folders (rbs's own state), empty folders included. `.rbs` is left
out in a git work tree too, ignored or not.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

from rbs.cas.errors import CasError

log = logging.getLogger(__name__)

EXCLUDED = frozenset({".git", ".rbs"})


def select_inputs(path: Path) -> list[str]:
    """Relative paths ('/'-separated, sorted) of the files, symlinks and (outside git)
    empty folders under `path` that belong in a bundle."""
    path = Path(path)
    if not path.is_dir():
        raise CasError(f"{path} is not a folder; give the folder whose files to bundle")
    if _in_git_work_tree(path):
        return sorted(_git_inputs(path))
    return sorted(_walk_inputs(path, ""))


def _git(path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-C", str(path), *args], capture_output=True, check=False, timeout=120
    )


def _in_git_work_tree(path: Path) -> bool:
    if shutil.which("git") is None:
        log.debug("git is not installed; selecting every file under %s", path)
        return False
    r = _git(path, "rev-parse", "--is-inside-work-tree")
    return r.returncode == 0 and r.stdout.strip() == b"true"


def _git_inputs(path: Path) -> list[str]:
    r = _git(path, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip()
        raise CasError(f"`git ls-files` failed in {path}: {err}")
    out: list[str] = []
    seen: set[str] = set()
    for raw in r.stdout.split(b"\0"):
        if not raw:
            continue
        rel = os.fsdecode(raw)
        # A file both staged-deleted and recreated, or listed by stage, appears twice.
        if rel in seen or EXCLUDED.intersection(rel.split("/")):
            continue
        seen.add(rel)
        full = path / rel
        if not os.path.lexists(full):
            continue  # tracked, but deleted from the work tree
        if full.is_dir() and not full.is_symlink():
            # A submodule (git lists its folder): take its files by its own rules.
            out.extend(f"{rel}/{sub}" for sub in select_inputs(full))
        else:
            out.append(rel)
    return out


def _walk_inputs(root: Path, prefix: str) -> list[str]:
    out: list[str] = []
    with os.scandir(root / prefix if prefix else root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name in EXCLUDED:
            continue
        rel = f"{prefix}{e.name}"
        if e.is_dir(follow_symlinks=False):
            inner = _walk_inputs(root, rel + "/")
            out.extend(inner if inner else [rel])
        else:
            out.append(rel)
    return out
