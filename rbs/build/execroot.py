"""Reusable exec roots: a sandbox folder emptied between actions instead of rebuilt.

Creating folders is the dearest file-system operation a build does (each action needs
~10 of them for paths like `bazel-out/k8-fastbuild/bin/pkg`), so a worker thread keeps
its exec root between actions: after an action every file, link and unexpected folder in it
is deleted, and only the folders the next action needs are kept. The next action sees
exactly its declared inputs, as in a fresh folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry


def _depth(rel: str) -> int:
    return rel.count("/") + 1 if rel else 0


class ExecRoot:
    """One local build worker's sandbox: `<box>/execroot/<workspace>` plus a private TMPDIR."""

    def __init__(self, root: Path, exec_root_name: str, store: BlobStore) -> None:
        self.box = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
        self.exec_root = self.box / "execroot" / exec_root_name
        self.tmp = self.box / "tmp"
        self.exec_root.mkdir(parents=True)
        self.tmp.mkdir()
        self.store = store
        self.dirs: set[str] = {""}  # folders below exec_root that exist now

    def populate(self, entries: Mapping[str, TreeEntry | None]) -> None:
        """Lay out an action's input root (the exec root must be empty, see `reset`)."""
        needed = {""}
        for rel, entry in entries.items():
            p = rel if entry is None else rel.rpartition("/")[0]
            while p not in needed:
                needed.add(p)
                p = p.rpartition("/")[0]
        for d in sorted(self.dirs - needed, key=_depth, reverse=True):
            os.rmdir(self.exec_root / d)
        for d in sorted(needed - self.dirs, key=_depth):
            os.mkdir(self.exec_root / d)
        self.dirs = needed
        for rel, entry in entries.items():
            if entry is None:
                continue
            if entry.symlink is not None:
                os.symlink(entry.symlink, self.exec_root / rel)
            else:
                assert entry.digest is not None
                self.store.export_file(
                    entry.digest, self.exec_root / rel, executable=entry.executable, link=True
                )

    def reset(self) -> bool:
        """Delete everything the last action saw or made, keeping known folders.

        Returns False when the exec root cannot be trusted any more (the action changed
        permissions or replaced a folder); the caller then throws it away."""
        try:
            for d in sorted(self.dirs, key=_depth, reverse=True):
                self._empty(self.exec_root / d, d)
            self._empty(self.tmp, None)
        except OSError:
            return False
        return True

    def _empty(self, path: Path, rel: str | None) -> None:
        with os.scandir(path) as it:
            for e in it:
                child = None if rel is None else (f"{rel}/{e.name}" if rel else e.name)
                if e.is_dir(follow_symlinks=False):
                    if child is not None and child in self.dirs:
                        continue
                    shutil.rmtree(e.path)
                else:
                    os.unlink(e.path)
