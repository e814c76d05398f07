"""A fresh folder per build action: the input root materialized, outputs' parents made.

Layout of one sandbox (under `<work_dir>/sandboxes/<id>/`):

    root/      the action's input root (hardlinks into the worker-local CAS where the
               filesystem allows); the command runs in root/<working_directory>
    stdout     the command's standard output, stored as a blob afterwards
    stderr     the same for standard error

Paths from the Command (working directory, outputs) are checked to stay inside
root/: a hostile `../../etc` is refused before anything runs.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rbs.cas.store import BlobStore
from rbs.cas.tree import materialize
from rbs.model import Digest


class SandboxError(ValueError):
    """A Command path that would escape the sandbox or is malformed."""


def safe_relative(path: str, what: str) -> PurePosixPath:
    """A normalized relative path that cannot leave its base (no '..', not absolute)."""
    p = PurePosixPath(path)
    if p.is_absolute():
        raise SandboxError(f"{what} {path!r} is absolute; REAPI paths are relative")
    if any(part == ".." for part in p.parts):
        raise SandboxError(f"{what} {path!r} contains '..'; it must stay inside the input root")
    return p


@dataclass(frozen=True, slots=True, kw_only=True)
class Sandbox:
    """One action's folder; `remove()` deletes it whatever the action did to it."""

    path: Path

    @property
    def root(self) -> Path:
        return self.path / "root"

    @property
    def stdout(self) -> Path:
        return self.path / "stdout"

    @property
    def stderr(self) -> Path:
        return self.path / "stderr"

    @classmethod
    def create(cls, base: Path, name: str) -> Sandbox:
        path = base / name
        if path.exists():
            # A leftover from a crashed attempt with the same lease: start clean.
            remove_tree(path)
        path.mkdir(parents=True)
        return cls(path=path)

    def populate(
        self,
        store: BlobStore,
        input_root: Digest,
        *,
        working_directory: str,
        outputs: Iterable[str],
        link: bool = True,
    ) -> Path:
        """Materialize the inputs, create the working directory and the parents of
        every output path; return the working directory."""
        materialize(store, input_root, self.root, link=link)
        wd_rel = safe_relative(working_directory or ".", "working_directory")
        wd = self.root / wd_rel
        wd.mkdir(parents=True, exist_ok=True)
        for out in outputs:
            rel = safe_relative(out, "output path")
            if rel == PurePosixPath("."):
                raise SandboxError("an output path names the working directory itself")
            (wd / rel).parent.mkdir(parents=True, exist_ok=True)
        return wd

    def remove(self) -> None:
        remove_tree(self.path)


def remove_tree(path: Path) -> None:
    """rmtree that also copes with folders the action made read-only."""

    def onerror(func: object, p: str, exc: object) -> None:
        parent = os.path.dirname(p)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        if os.path.isdir(p) and not os.path.islink(p):
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR | stat.S_IXUSR)
            shutil.rmtree(p, onerror=onerror)
        else:
            os.unlink(p)

    if path.exists():
        shutil.rmtree(path, onerror=onerror)
