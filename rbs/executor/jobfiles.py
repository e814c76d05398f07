"""A job's files on a worker: its folders, base environment, inputs in, outputs out.

Each run gets `<work-dir>/jobs/<lease>/` holding `work/` (the working directory),
`tmp/` (its TMPDIR) and `log.jsonl` (the numbered log spool). Inputs are copied out of
the CAS, never hardlinked: a job may modify its inputs, and a hardlink would let it
corrupt the worker's cache. Outputs and the checkpoint folder are stored as Merkle
trees through the worker's two-level store, which writes through to the server, so a
tree digest reported to the server names blobs the server holds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry, build_tree, materialize, tree_from_path
from rbs.executor.outputs import OutputKind, check_declared, collect_outputs
from rbs.model import Digest, DigestFunction

# Used when the worker's own environment has no PATH (a bare container, a unit file).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Variables copied from the worker's environment when it has them.
INHERITED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDirs:
    """The folders and files of one run on the worker (paths made once: they are asked
    for many times per run)."""

    root: Path
    work: Path = field(init=False)
    tmp: Path = field(init=False)
    spool: Path = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "work", self.root / "work")
        object.__setattr__(self, "tmp", self.root / "tmp")
        object.__setattr__(self, "spool", self.root / "log.jsonl")


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectedTrees:
    """What a finished run left in the CAS, and notes for its sys log."""

    outputs: Digest | None = None
    checkpoint: Digest | None = None
    notes: tuple[str, ...] = ()


def base_env(dirs: RunDirs, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every job starts from, before the scheduler's variables.

    Jobs do not inherit the worker's whole environment (its tokens and settings are
    not the job's business); they get PATH, HOME, USER/LOGNAME, LANG/LC_ALL and TZ as
    the worker has them, so the tools the worker's user can run are found and behave
    as at a login shell, plus SHELL=/bin/sh, PWD, and a private TMPDIR that is
    removed with the run.
    """
    env = inherited(os.environ if source is None else source)
    env.setdefault("PATH", DEFAULT_PATH)
    env.setdefault("HOME", str(dirs.work))
    env.setdefault("LANG", "C.UTF-8")
    env["SHELL"] = "/bin/sh"
    env["PWD"] = str(dirs.work)
    env["TMPDIR"] = str(dirs.tmp)
    return env


def inherited(source: Mapping[str, str]) -> dict[str, str]:
    """The variables of `source` a job inherits (`INHERITED`, where set and not empty)."""
    return {k: v for k in INHERITED if (v := source.get(k))}


def make_root(dirs: RunDirs) -> bool:
    """Make the run's folder (and the folders above it); True when it is new, False
    when an earlier try of the same lease left it (its spool goes on)."""
    try:
        os.mkdir(dirs.root)
    except FileExistsError:
        return False
    except FileNotFoundError:  # the worker's jobs/ folder is gone: make it again
        dirs.root.mkdir(parents=True, exist_ok=True)
    return True


def prepare(
    store: BlobStore,
    dirs: RunDirs,
    *,
    input_root: Digest | None,
    checkpoint: Digest | None,
    checkpoint_dir: str | None,
    prefetch: Callable[[Digest], None] | None = None,
    fresh: bool = False,
    made: bool = False,
) -> list[str]:
    """Create the run's folders and materialize its inputs (and checkpoint) by copy.

    `fresh`: `make_root` has just made the run's folder, so nothing of an earlier try
    is in it; `made`: a reused folder (`runfolders`), whose `work/` and `tmp/` are there
    and empty. Returns lines for the job's sys log. Raises CasError/OSError when an input
    cannot be materialized; the caller reports that as the run's failure.
    """
    notes: list[str] = []
    if not fresh and not made:
        dirs.root.mkdir(parents=True, exist_ok=True)
        for leftover in (dirs.work, dirs.tmp):
            remove(leftover)  # of an earlier try of this very lease; the spool stays
    if not made:
        dirs.tmp.mkdir()
    if input_root is not None:
        if prefetch is not None:
            prefetch(input_root)
        materialize(store, input_root, dirs.work, link=False)
        notes.append(f"inputs: materialized {input_root}")
    elif not made:
        dirs.work.mkdir()
    if checkpoint is not None:
        if not checkpoint_dir:
            raise ValueError(
                "the lease carries a checkpoint but the job declares no checkpoint_dir"
            )
        (rel,) = check_declared([checkpoint_dir])
        dest = dirs.work / rel
        # The checkpoint is newer than whatever the inputs hold at that path.
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            shutil.rmtree(dest)
        if prefetch is not None:
            prefetch(checkpoint)
        materialize(store, checkpoint, dest, link=False)
        notes.append(f"checkpoint: restored {checkpoint} into {rel}/")
    return notes


def collect(
    store: BlobStore,
    workdir: Path,
    *,
    outputs: tuple[str, ...],
    checkpoint_dir: str | None,
    function: DigestFunction,
) -> CollectedTrees:
    """Store the declared outputs as one tree (each under its declared path) and the
    checkpoint folder as another; either is None when the job declares none."""
    notes: list[str] = []
    out_digest = None
    if outputs:
        result = collect_outputs(workdir, outputs)
        entries: dict[str, TreeEntry | None] = {}
        with store.batch() as puts:
            for found in result.found:
                if found.kind is OutputKind.FILE:
                    digest = puts.put_file(found.path, function=function)
                    entries[found.declared] = TreeEntry(digest=digest, executable=found.executable)
                else:
                    _add_folder(puts.put_file, found.path, found.declared, entries, function)
        out_digest = build_tree(store, entries, function=function)
        files = sum(1 for e in entries.values() if e is not None and e.digest is not None)
        notes.append(
            f"outputs: stored {files} file(s) from {len(result.found)} declared path(s) "
            f"as {out_digest}"
        )
        notes.extend(f"declared output {m!r} was not created" for m in result.missing)
        notes.extend(f"output refused: {r.reason}" for r in result.rejected)
    ckpt_digest = None
    if checkpoint_dir:
        result = collect_outputs(workdir, [checkpoint_dir])
        if result.found and result.found[0].kind is OutputKind.DIRECTORY:
            ckpt_digest = tree_from_path(store, result.found[0].path, function=function)
            notes.append(f"checkpoint: saved {checkpoint_dir}/ as {ckpt_digest}")
        elif result.found:
            notes.append(f"checkpoint: {checkpoint_dir!r} is a file, not a folder; not saved")
        elif result.rejected:
            notes.append(f"checkpoint refused: {result.rejected[0].reason}")
        else:
            notes.append(f"checkpoint: {checkpoint_dir}/ does not exist; nothing saved")
    return CollectedTrees(outputs=out_digest, checkpoint=ckpt_digest, notes=tuple(notes))


def _add_folder(
    put_file: Callable[..., Digest],
    folder: Path,
    prefix: str,
    entries: dict[str, TreeEntry | None],
    function: DigestFunction,
) -> None:
    """Every file, symlink and empty folder under `folder`, named under `prefix`;
    symlinks are stored as links and never followed."""
    empty = True
    with os.scandir(folder) as it:
        items = sorted(it, key=lambda e: e.name)
    for e in items:
        empty = False
        rel = f"{prefix}/{e.name}"
        st = e.stat(follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            entries[rel] = TreeEntry(symlink=os.readlink(e.path))
        elif stat.S_ISDIR(st.st_mode):
            _add_folder(put_file, Path(e.path), rel, entries, function)
        elif stat.S_ISREG(st.st_mode):
            digest = put_file(e.path, function=function)
            entries[rel] = TreeEntry(digest=digest, executable=bool(st.st_mode & 0o111))
        # Sockets, fifos and devices have no place in a tree; they are skipped.
    if empty:
        entries[prefix] = None


def remove(path: Path) -> None:
    """Remove a run's folder, also read-only parts a job left behind."""

    def writable(func: Callable[..., object], p: str, _exc: object) -> None:
        parent = os.path.dirname(p)
        try:
            os.chmod(parent, 0o700)
            func(p)
        except OSError:
            pass

    # Most runs leave an empty folder, or none: one rmdir beats rmtree's walk.
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass  # not empty, not a folder, or not writable: the general way below
    if path.exists():
        shutil.rmtree(path, onerror=writable)


def remove_if_empty(dirs: RunDirs) -> bool:
    """Remove a run's folder when the job left nothing in it (a few system calls, no
    walk); False when something is left for `remove`."""
    try:
        for empty in (dirs.work, dirs.tmp):
            with contextlib.suppress(FileNotFoundError):
                empty.rmdir()
        with contextlib.suppress(FileNotFoundError):
            dirs.spool.unlink()
        dirs.root.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True
