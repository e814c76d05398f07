"""The workspace on disk: its root, its packages, file lookups and `glob()`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from rbs.build.errors import BuildError, closest
from rbs.build.labels import RBS_REPO, Label, Pattern

BUILD_NAMES = ("BUILD.rbs", "BUILD", "BUILD.bazel")
OUT_DIR = "rbs-out"
STATE_DIR = ".rbs"
# Folders that never hold packages: outputs, state, VCS data, Bazel's convenience links.
_SKIP = re.compile(r"^(?:\..*|rbs-out|bazel-.*|node_modules|__pycache__)$")
# Files that mark a workspace root: Bazel's WORKSPACE, and bzlmod's MODULE.bazel (rbs
# reads no module file: the rule sets its bazel_dep()s name are built into rbs).
ROOT_FILES = ("WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel", "REPO.bazel")
_WS_NAME = re.compile(r"""workspace\s*\(\s*name\s*=\s*["']([A-Za-z0-9_.-]+)["']""")


def rules_root() -> Path:
    """Where `@rbs//...` files live: the `rules/` folder (shipped as the `rbs.rules` package)."""
    here = Path(__file__).resolve().parent.parent
    for cand in (here.parent / "rules", here / "rules"):
        if cand.is_dir():
            return cand
    raise BuildError("rbs's rule library (rules/) is missing", hint="reinstall rbs")


def find_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding a WORKSPACE (or bzlmod's MODULE.bazel)."""
    cur = start.resolve()
    for d in (cur, *cur.parents):
        if any((d / n).is_file() for n in ROOT_FILES):
            return d
    raise BuildError(
        f"no WORKSPACE file in {cur} or any folder above it",
        hint="run rbs inside a workspace, or create an empty WORKSPACE file at its root",
    )


@dataclass(slots=True)
class Workspace:
    """A workspace root with cached package discovery."""

    root: Path
    _packages: list[str] | None = field(default=None, repr=False)
    _dirs: list[str] = field(default_factory=list, repr=False)

    @property
    def name(self) -> str:
        """The workspace name used in runfiles trees (Bazel's default is __main__)."""
        for fname in ("WORKSPACE", "WORKSPACE.bazel"):
            p = self.root / fname
            if p.is_file():
                m = _WS_NAME.search(p.read_text(errors="replace"))
                if m:
                    return m.group(1)
        if not any((self.root / n).is_file() for n in ("WORKSPACE", "WORKSPACE.bazel")):
            return "_main"  # bzlmod's name for the main repository
        return "__main__"

    @property
    def out_dir(self) -> Path:
        return self.root / OUT_DIR

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    def repo_root(self, repo: str) -> Path:
        if repo == "":
            return self.root
        if repo == RBS_REPO:
            return rules_root()
        raise BuildError(
            f"unknown repository @{repo}",
            hint="rbs knows this workspace (//...) and its own rules (@rbs//...)",
        )

    def build_file(self, package: str, repo: str = "") -> Path | None:
        base = self.repo_root(repo) / package if package else self.repo_root(repo)
        for name in BUILD_NAMES:
            p = base / name
            if p.is_file():
                return p
        return None

    def packages(self) -> list[str]:
        """Every package of the workspace, sorted; also records every folder walked."""
        if self._packages is None:
            found: list[str] = []
            dirs: list[str] = []
            for dirpath, dirnames, filenames in os.walk(self.root):
                rel = os.path.relpath(dirpath, self.root)
                rel = "" if rel == "." else rel.replace(os.sep, "/")
                if rel and ("WORKSPACE" in filenames or "WORKSPACE.bazel" in filenames):
                    dirnames[:] = []  # a nested workspace is not part of this one
                    continue
                dirs.append(rel)
                dirnames[:] = sorted(d for d in dirnames if not _SKIP.match(d))
                if any(n in filenames for n in BUILD_NAMES):
                    found.append(rel)
            self._packages = sorted(found)
            self._dirs = dirs
        return self._packages

    @property
    def walked_dirs(self) -> list[str]:
        self.packages()
        return self._dirs

    def expand(self, pattern: Pattern) -> list[str]:
        """The packages a pattern covers; a missing package is an error with a suggestion."""
        pkgs = self.packages()
        if pattern.recursive:
            hit = [p for p in pkgs if pattern.matches_package(p)]
            if not hit:
                raise BuildError(
                    f"no packages below //{pattern.package} match {pattern}",
                    hint="a package is a folder with a BUILD file",
                )
            return hit
        if pattern.package not in pkgs:
            raise missing_package(pattern.package, pkgs)
        return [pattern.package]

    def package_of_path(self, path: str) -> str | None:
        """The package that owns a workspace-relative file path (deepest BUILD folder)."""
        parts = path.split("/")[:-1]
        pkgs = set(self.packages())
        for i in range(len(parts), -1, -1):
            cand = "/".join(parts[:i])
            if cand in pkgs:
                return cand
        return None

    def cwd_package(self, cwd: Path) -> str:
        try:
            rel = cwd.resolve().relative_to(self.root)
        except ValueError:
            return ""
        return "" if str(rel) == "." else rel.as_posix()

    def source_path(self, label: Label) -> Path:
        return self.repo_root(label.repo) / label.path


def missing_package(package: str, known: list[str]) -> BuildError:
    near = closest(package, known)
    hint = f"did you mean //{near}?" if near is not None else "create a BUILD file in that folder"
    return BuildError(f"no such package //{package} (no BUILD file in {package or '.'})", hint=hint)


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = []
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append("(?:[^/]+/)*" if not last else ".*")
            continue
        seg = ""
        for ch in part:
            if ch == "*":
                seg += "[^/]*"
            elif ch == "?":
                seg += "[^/]"
            else:
                seg += re.escape(ch)
        out.append(seg + ("" if last else "/"))
    return re.compile("".join(out))


def package_files(
    ws: Workspace, package: str, repo: str = "", *, dirs: list[str] | None = None
) -> list[str]:
    """Files of a package (relative to it), not descending into subpackages.

    Every folder looked at is appended to `dirs` (workspace-relative): adding or
    removing a file changes its folder's stat data, which invalidates cached loading."""
    base = ws.repo_root(repo) / package if package else ws.repo_root(repo)
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base):
        if dirs is not None:
            dirs.append(os.path.relpath(dirpath, ws.root).replace(os.sep, "/"))
        rel = os.path.relpath(dirpath, base)
        rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        keep = []
        for d in sorted(dirnames):
            if _SKIP.match(d):
                continue
            sub = Path(dirpath) / d
            if any((sub / n).is_file() for n in (*BUILD_NAMES, "WORKSPACE")):
                continue  # a subpackage owns its own files
            keep.append(d)
        dirnames[:] = keep
        files.extend(rel + f for f in filenames)
    return sorted(files)


def glob(
    files: list[str], include: list[str], exclude: list[str], *, allow_empty: bool = True
) -> list[str]:
    """Bazel's glob over a package's file list: `*`, `?`, `**`; sorted, de-duplicated."""
    inc = [_glob_regex(p) for p in include]
    exc = [_glob_regex(p) for p in exclude]
    hit = [
        f
        for f in files
        if any(r.fullmatch(f) for r in inc) and not any(r.fullmatch(f) for r in exc)
    ]
    if not hit and not allow_empty:
        raise ValueError(f"glob({include!r}) matched no files and allow_empty = False")
    return hit
