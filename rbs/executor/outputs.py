"""Resolve a job's declared output paths inside its work folder, and store them in the CAS.

Declarations are checked up front (relative, no '..'): a bad one is an error in the
job's manifest. What the job left behind is checked when it ends: a declared path
that resolves outside the work folder (through a symlink the job created) is
rejected by name rather than followed, so a job cannot make the worker upload, say,
/etc/shadow. The job's processes are gone by then, so nothing moves under our feet.
"""

from __future__ import annotations

import enum
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rbs.cas.store import BlobStore
    from rbs.model import Digest, DigestFunction


class OutputPathError(ValueError):
    """A declared output path is not a plain relative path inside the work folder."""


class OutputKind(enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundOutput:
    """A declared output that exists: `path` is its real location inside the work folder."""

    declared: str
    path: Path
    kind: OutputKind
    executable: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectedOutput:
    """A declared output that exists but may not be collected, and why."""

    declared: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputsResult:
    found: tuple[FoundOutput, ...] = ()
    missing: tuple[str, ...] = ()
    rejected: tuple[RejectedOutput, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredOutput:
    """An output in the CAS: a file blob, or the root `Directory` digest of a folder."""

    declared: str
    kind: OutputKind
    digest: Digest
    executable: bool = False


def check_declared(paths: Iterable[str]) -> tuple[str, ...]:
    """Normalize declared output paths ("a/./b/" -> "a/b"); refuse any that could escape."""
    out: dict[str, None] = {}
    for raw in paths:
        if not isinstance(raw, str) or not raw or "\0" in raw:
            raise OutputPathError(f"output path {raw!r} must be a non-empty string without NUL")
        if raw.startswith("/"):
            raise OutputPathError(
                f"output path {raw!r} is absolute; declare it relative to the job's work folder"
            )
        parts = [p for p in PurePosixPath(raw).parts if p != "."]
        if ".." in parts:
            raise OutputPathError(
                f"output path {raw!r} uses '..' and could leave the job's work folder; "
                "declare a path inside it"
            )
        if not parts:
            raise OutputPathError(
                f"output path {raw!r} names the work folder itself; declare the files or "
                "folders inside it"
            )
        out["/".join(parts)] = None
    return tuple(out)


def collect_outputs(workdir: Path, declared: Iterable[str]) -> OutputsResult:
    """Find each declared output under `workdir`: found, missing, or rejected with a reason."""
    root = Path(workdir).resolve(strict=True)
    found: list[FoundOutput] = []
    missing: list[str] = []
    rejected: list[RejectedOutput] = []
    for rel in check_declared(declared):
        try:
            real = (root / rel).resolve(strict=True)
        except FileNotFoundError:
            if os.path.lexists(root / rel):
                rejected.append(RejectedOutput(declared=rel, reason=_dangling(root, rel)))
            else:
                missing.append(rel)
            continue
        except (RuntimeError, OSError) as e:  # a symlink loop, or a component not a folder
            rejected.append(RejectedOutput(declared=rel, reason=f"cannot resolve {rel!r}: {e}"))
            continue
        if not real.is_relative_to(root):
            rejected.append(
                RejectedOutput(
                    declared=rel,
                    reason=(
                        f"output {rel!r} resolves to {real}, outside the job's work folder "
                        f"{root} (through a symlink); rbs collects only paths inside it"
                    ),
                )
            )
            continue
        st = os.stat(real)
        if stat.S_ISDIR(st.st_mode):
            found.append(FoundOutput(declared=rel, path=real, kind=OutputKind.DIRECTORY))
        elif stat.S_ISREG(st.st_mode):
            found.append(
                FoundOutput(
                    declared=rel,
                    path=real,
                    kind=OutputKind.FILE,
                    executable=bool(st.st_mode & 0o111),
                )
            )
        else:
            rejected.append(
                RejectedOutput(
                    declared=rel,
                    reason=f"output {rel!r} is neither a regular file nor a folder",
                )
            )
    return OutputsResult(found=tuple(found), missing=tuple(missing), rejected=tuple(rejected))


def _dangling(root: Path, rel: str) -> str:
    return f"output {rel!r} is a symlink whose target does not exist ({os.readlink(root / rel)!r})"


def store_outputs(
    store: BlobStore, result: OutputsResult, function: DigestFunction | None = None
) -> tuple[StoredOutput, ...]:
    """Put every found output into `store`: files as blobs, folders as Merkle trees.

    Symlinks inside an output folder are stored as symlinks and never followed.
    """
    from rbs.cas.tree import tree_from_path
    from rbs.model import DEFAULT_FUNCTION

    fn = function or DEFAULT_FUNCTION
    stored = []
    for out in result.found:
        if out.kind is OutputKind.DIRECTORY:
            digest = tree_from_path(store, out.path, function=fn)
        else:
            digest = store.put_file(out.path, function=fn)
        stored.append(
            StoredOutput(
                declared=out.declared, kind=out.kind, digest=digest, executable=out.executable
            )
        )
    return tuple(stored)
