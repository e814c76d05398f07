"""Where a job target came from: its git commit, a dirty tree, and `//pkg:target@REV`.

A job built from a target records, in its provenance (keys under ORIGIN, beside the
per-field sources): the target label, the digest of the manifest the build wrote, and
the workspace's git commit with whether the tree was dirty. `//pkg:target@REV` builds
the target as of git revision REV in a temporary `git worktree` (removed afterwards)
whose build store is the workspace's own, so the staged tree stays available to
`rbs job resubmit` and to later submits.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rbs.client.errors import JobError
from rbs.model import Digest, DigestFunction, JobManifest

# Provenance keys that say where a job came from (not which field came from where).
ORIGIN = "origin."
TARGET_KEY = ORIGIN + "target"
COMMIT_KEY = ORIGIN + "commit"
DIRTY_KEY = ORIGIN + "dirty"
REV_KEY = ORIGIN + "rev"
MANIFEST_KEY = ORIGIN + "manifest"
RESUBMIT_KEY = ORIGIN + "resubmit_of"

REV_FORMS = (
    "//pkg:target or //pkg:target@REV, REV a git commit, branch or tag "
    "(e.g. //app:train@HEAD~1, //app:train@v1.2, //app:train@3fc990a)"
)
# Build outputs and state never make a tree dirty.
_NOT_SOURCES = (":(exclude)rbs-out", ":(exclude).rbs")


def manifest_digest(m: JobManifest) -> Digest:
    """The SHA-256 digest of the manifest's canonical JSON (the bytes a build writes)."""
    from rbs.wire.manifest import manifest_to_json

    data = manifest_to_json(m).encode()
    return Digest(
        function=DigestFunction.SHA256, hash=hashlib.sha256(data).hexdigest(), size=len(data)
    )


def split_rev(target: str) -> tuple[str, str | None]:
    """`//pkg:t@REV` -> ("//pkg:t", "REV"); a label without @REV (or `@repo//...`) as is."""
    head, sep, rev = target.rpartition("@")
    if not sep or not head or not ("//" in head or head.startswith(":")):
        return target, None
    if not rev:
        raise JobError(f"{target}: empty revision after @; write {REV_FORMS}")
    return head, rev


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False
        )
    except OSError as e:
        raise JobError(f"cannot run git: {e.strerror}") from None


def git_toplevel(root: Path) -> Path | None:
    """The git work tree holding `root`, or None outside one."""
    done = _git(root, "rev-parse", "--show-toplevel")
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


def git_state(root: Path) -> dict[str, str]:
    """The origin keys for the workspace at `root`: its commit and dirtiness ({} outside git)."""
    if git_toplevel(root) is None:
        return {}
    head = _git(root, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return {}  # a repository without commits yet
    status = _git(root, "status", "--porcelain", "--", ".", *_NOT_SOURCES)
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    return {COMMIT_KEY: head.stdout.strip(), DIRTY_KEY: "true" if dirty else "false"}


def resolve_rev(root: Path, target: str, rev: str) -> str:
    """The full commit id of REV in the work tree around `root`; refused outside git."""
    if git_toplevel(root) is None:
        raise JobError(
            f"{target}: @{rev} builds the target as of a git revision, but the workspace "
            f"{root} is not in a git work tree; submit {target.rpartition('@')[0]} without "
            f"@REV, or run from a git checkout. Accepted forms: {REV_FORMS}"
        )
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise JobError(
            f"{target}: {rev!r} is not a commit, branch or tag of the git repository at "
            f"{git_toplevel(root)}. Accepted forms: {REV_FORMS}"
        )
    return done.stdout.strip()


@contextlib.contextmanager
def worktree_at(root: Path, commit: str) -> Iterator[Path]:
    """The workspace at `root` as of `commit`, in a temporary git worktree; yields its root.

    The worktree's build store (`.rbs/cas`) is the workspace's, linked in, so blobs built
    there outlive the worktree. The worktree is removed afterwards, also on errors.
    """
    top = git_toplevel(root)
    assert top is not None
    rel = root.resolve().relative_to(top.resolve())
    tmp = Path(tempfile.mkdtemp(prefix="rbs-rev-"))
    tree = tmp / "tree"
    added = _git(top, "worktree", "add", "--detach", str(tree), commit)
    if added.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise JobError(f"git worktree add {commit[:12]} failed: {added.stderr.strip()}")
    try:
        ws = tree / rel
        from rbs.build.workspace import ROOT_FILES

        if not any((ws / n).is_file() for n in ROOT_FILES):
            raise JobError(
                f"commit {commit[:12]} has no workspace at {rel.as_posix() or '.'} "
                "(no WORKSPACE file there)"
            )
        store = root / ".rbs" / "cas"
        store.mkdir(parents=True, exist_ok=True)
        (ws / ".rbs").mkdir(exist_ok=True)
        # A commit may hold a `.rbs/cas` (committed by mistake): the workspace's is used.
        shutil.rmtree(ws / ".rbs" / "cas", ignore_errors=True)
        (ws / ".rbs" / "cas").symlink_to(store.resolve(), target_is_directory=True)
        yield ws
    finally:
        _git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        _git(top, "worktree", "prune")


__all__ = [
    "COMMIT_KEY",
    "DIRTY_KEY",
    "MANIFEST_KEY",
    "ORIGIN",
    "RESUBMIT_KEY",
    "REV_FORMS",
    "REV_KEY",
    "TARGET_KEY",
    "git_state",
    "manifest_digest",
    "resolve_rev",
    "split_rev",
    "worktree_at",
]
