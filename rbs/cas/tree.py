"""Merkle trees as REAPI `Directory` messages: build from disk or memory, walk, materialize.

Names are validated in both directions ('', '.', '..' and names holding '/' or NUL are
refused), so a hostile tree can never make `materialize` write outside its destination.
Symlinks are stored and recreated as symlinks, never followed: a link whose target
points outside the tree is materialized as that link and nothing is written through it.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas import transfer
from rbs.cas.digests import digest_from_pb, digest_to_pb
from rbs.cas.errors import BlobNotFound, CorruptBlob, InvalidDigest, InvalidTree
from rbs.cas.fileio import map_in_slices
from rbs.cas.store import Batch, BlobStore
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction

_PARALLEL_FROM = 64
_THREADS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class TreeEntry:
    """One leaf of a tree: a file (digest, executable bit) or a symlink (target)."""

    digest: Digest | None = None
    executable: bool = False
    symlink: str | None = None

    def __post_init__(self) -> None:
        if (self.digest is None) == (self.symlink is None):
            raise ValueError("a tree entry is either a file (digest) or a symlink (target)")


def check_name(name: str, where: str = "") -> str:
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        at = f" in {where}" if where else ""
        raise InvalidTree(
            f"invalid path component {name!r}{at}: names must be non-empty and must not be "
            "'.', '..' or contain '/'"
        )
    return name


def split_path(rel: str) -> list[str]:
    """Split a relative path into validated components."""
    if rel.startswith("/"):
        raise InvalidTree(f"path {rel!r} is absolute; tree paths are relative to the tree root")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        raise InvalidTree(f"path {rel!r} names the tree root, not a file")
    for p in parts:
        check_name(p, rel)
    return parts


def _child(pb: re_pb2.Digest, function: DigestFunction) -> Digest:
    """A digest listed in a Directory message: a malformed one makes the tree invalid."""
    try:
        return digest_from_pb(pb, function)
    except InvalidDigest as e:
        raise InvalidTree(str(e)) from None


@dataclass
class _Node:
    files: dict[str, TreeEntry] = field(default_factory=dict)
    dirs: dict[str, _Node] = field(default_factory=dict)


def _insert(root: _Node, rel: str, entry: TreeEntry | None) -> None:
    parts = split_path(rel)
    node = root
    for p in parts[:-1]:
        if p in node.files:
            raise InvalidTree(f"{rel!r}: {p!r} is both a file and a directory")
        node = node.dirs.setdefault(p, _Node())
    leaf = parts[-1]
    if entry is None:
        if leaf in node.files:
            raise InvalidTree(f"{rel!r} is both a file and a directory")
        node.dirs.setdefault(leaf, _Node())
        return
    if leaf in node.dirs:
        raise InvalidTree(f"{rel!r} is both a file and a directory")
    node.files[leaf] = entry


def _store_node(puts: Batch, node: _Node, function: DigestFunction) -> Digest:
    msg = re_pb2.Directory()
    for name in sorted(node.files):
        e = node.files[name]
        if e.symlink is not None:
            msg.symlinks.add(name=name, target=e.symlink)
        else:
            assert e.digest is not None
            msg.files.add(name=name, digest=digest_to_pb(e.digest), is_executable=e.executable)
    for name in sorted(node.dirs):
        child = _store_node(puts, node.dirs[name], function)
        msg.directories.add(name=name, digest=digest_to_pb(child))
    return puts.put_message(msg, function)


def build_tree(
    store: BlobStore,
    entries: Mapping[str, TreeEntry | None],
    *,
    function: DigestFunction = DEFAULT_FUNCTION,
) -> Digest:
    """Store the Directory messages for `entries` (relative path -> leaf, or None for an
    empty directory) and return the root digest. File blobs must already be stored."""
    with store.batch() as puts:
        return _build(puts, entries, function)


def _build(
    puts: Batch, entries: Mapping[str, TreeEntry | None], function: DigestFunction
) -> Digest:
    root = _Node()
    for rel, entry in entries.items():
        if entry is not None and entry.digest is not None and entry.digest.function != function:
            raise InvalidTree(
                f"{rel!r} has a {entry.digest.function.value} digest in a {function.value} tree"
            )
        _insert(root, rel, entry)
    return _store_node(puts, root, function)


def _leaf(puts: Batch, full: str, rel: str, function: DigestFunction) -> TreeEntry | None:
    """The tree entry for one path (None: a directory), storing a file's bytes."""
    st = os.lstat(full)
    if stat.S_ISLNK(st.st_mode):
        return TreeEntry(symlink=os.readlink(full))
    if stat.S_ISREG(st.st_mode):
        digest = puts.put_file(full, function=function)
        return TreeEntry(digest=digest, executable=bool(st.st_mode & 0o111))
    if stat.S_ISDIR(st.st_mode):
        return None
    raise InvalidTree(
        f"{rel!r} at {full} is not a regular file, directory or symlink; "
        "remove it or leave it out of the selection"
    )


def _walk(root: str, prefix: str, out: list[tuple[str, str]]) -> None:
    """(relative path, full path) of everything under `root`/`prefix`, not following
    symlinks; a directory is listed only when empty (its files imply the rest)."""
    with os.scandir(f"{root}/{prefix}" if prefix else root) as it:
        entries = list(it)
    if not entries and prefix:
        out.append((prefix.rstrip("/"), f"{root}/{prefix}"))
    for e in entries:
        if e.is_dir(follow_symlinks=False):
            _walk(root, f"{prefix}{e.name}/", out)
        else:
            out.append((prefix + e.name, e.path))


def _file_size(full: str) -> int:
    """A regular file's size (0 for anything else, or a path gone: storing it says why)."""
    try:
        st = os.lstat(full)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _check_parents(root: Path, rel: str, checked: set[str]) -> None:
    """Refuse a selected path reached through a symlinked folder: the tree would
    otherwise store files from outside `root`."""
    parts = split_path(rel)[:-1]
    for i in range(len(parts)):
        sub = "/".join(parts[: i + 1])
        if sub in checked:
            continue
        if os.path.islink(root / sub):
            raise InvalidTree(
                f"{rel!r} lies under {sub!r}, a symlink: a tree stores symlinks as links and "
                "never reads through them; select the link itself or the real path"
            )
        checked.add(sub)


def tree_from_path(
    store: BlobStore,
    path: Path,
    *,
    function: DigestFunction = DEFAULT_FUNCTION,
    select: Iterable[str] | None = None,
) -> Digest:
    """Store the tree rooted at `path` (all of it, or only the relative paths in
    `select`) with every file blob, and return the root Directory digest.

    Blobs are written in one batch (durable together, see `Batch`), so a large tree
    pays for the disk's sync latency a few times instead of once per file. With a
    progress sink listening (rbs.cas.transfer) the files' bytes are expected first."""
    path = Path(path)
    if not path.is_dir():
        raise InvalidTree(f"{path} is not a directory; give the folder to store as a tree")
    root = str(path)
    found: list[tuple[str, str]] = []
    if select is None:
        _walk(root, "", found)
    else:
        checked: set[str] = set()
        for rel in select:
            _check_parents(path, rel, checked)
            found.append((rel, f"{root}/{rel}"))
    sink = transfer.listening()
    if sink is not None:
        transfer.expect(sum(_file_size(full) for _, full in found))
    with store.batch() as puts:

        def leaf(item: tuple[str, str]) -> TreeEntry | None:
            rel, full = item
            try:
                if sink is None:
                    return _leaf(puts, full, rel, function)
                with transfer.reporting(sink):  # on a pool thread the sink is not set
                    return _leaf(puts, full, rel, function)
            except FileNotFoundError:
                raise InvalidTree(
                    f"{rel!r} does not exist under {path}; it was selected or listed but "
                    "is gone (was it deleted while the tree was being stored?)"
                ) from None

        # Storing a small file is mostly waiting on system calls, which release the
        # GIL: a few threads keep both the CPU and the file system busy.
        if len(found) >= _PARALLEL_FROM:
            with ThreadPoolExecutor(_THREADS, thread_name_prefix="rbs-tree") as pool:
                leaves = map_in_slices(pool, leaf, found, _THREADS)
        else:
            leaves = [leaf(item) for item in found]
        entries = {rel: e for (rel, _), e in zip(found, leaves, strict=True)}
        return _build(puts, entries, function)


def read_directory(store: BlobStore, digest: Digest) -> re_pb2.Directory:
    msg = re_pb2.Directory()
    try:
        msg.ParseFromString(store.get(digest))
    except (BlobNotFound, CorruptBlob):
        raise
    except Exception as e:  # DecodeError and friends: the blob is not a Directory.
        raise InvalidTree(f"blob {digest} is not a valid Directory message: {e}") from None
    return msg


def walk_tree(store: BlobStore, root: Digest) -> Iterator[tuple[str, TreeEntry | None]]:
    """Yield (relative path, leaf) for every file and symlink, and (path, None) for
    every directory, parents before children."""
    stack: list[tuple[str, Digest]] = [("", root)]
    while stack:
        prefix, digest = stack.pop()
        msg = read_directory(store, digest)
        names = [n.name for n in (*msg.files, *msg.symlinks, *msg.directories)]
        if len(set(names)) != len(names):
            dup = sorted(n for n in set(names) if names.count(n) > 1)
            raise InvalidTree(f"directory {prefix or '/'} of {digest} lists {dup} twice")
        for f in msg.files:
            yield (
                prefix + check_name(f.name, prefix or "/"),
                TreeEntry(digest=_child(f.digest, root.function), executable=f.is_executable),
            )
        for s in msg.symlinks:
            rel = prefix + check_name(s.name, prefix or "/")
            if not s.target or "\0" in s.target:
                raise InvalidTree(
                    f"symlink {rel!r} of {digest} has an empty target or one holding NUL"
                )
            yield rel, TreeEntry(symlink=s.target)
        for d in msg.directories:
            rel = prefix + check_name(d.name, prefix or "/")
            yield rel, None
            stack.append((rel + "/", _child(d.digest, root.function)))


def collect_directories(store: BlobStore, root: Digest) -> list[re_pb2.Directory]:
    """Every Directory message of the tree, root first (what GetTree and Tree need)."""
    out = []
    stack = [root]
    while stack:
        msg = read_directory(store, stack.pop())
        out.append(msg)
        stack.extend(_child(d.digest, root.function) for d in reversed(msg.directories))
    return out


def materialize(store: BlobStore, root: Digest, dest: Path, *, link: bool = True) -> None:
    """Recreate the tree under `dest` (created if needed; existing entries are an error).

    Files are hardlinked from the store where it can (`link`), else copied; symlinks
    are created as links and never written through. If `dest` did not exist and the
    tree cannot be fully materialized (a blob is missing, a name is hostile), `dest`
    is removed again, so a failure leaves nothing half made. With a progress sink
    listening (rbs.cas.transfer) the files' bytes are expected first."""
    dest = Path(dest)
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        entries: Iterable[tuple[str, TreeEntry | None]] = walk_tree(store, root)
        if transfer.listening() is not None:
            entries = list(entries)
            transfer.expect(sum(e.digest.size for _, e in entries if e and e.digest))
        for rel, entry in entries:
            target = dest / rel
            try:
                if entry is None:
                    target.mkdir()
                elif entry.symlink is not None:
                    os.symlink(entry.symlink, target)
                else:
                    assert entry.digest is not None
                    store.export_file(entry.digest, target, executable=entry.executable, link=link)
            except FileExistsError:
                raise FileExistsError(
                    f"cannot materialize {root} into {dest}: {rel!r} already exists there; "
                    "materialize into an empty or new folder"
                ) from None
            except BlobNotFound as e:
                raise BlobNotFound(e.digest, where=f"{rel!r} of tree {root}") from None
    except BaseException:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        raise
