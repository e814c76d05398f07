"""Merkle trees as REAPI `Directory` messages: build from disk or memory, walk, materialize.

Names are validated in both directions ('', '.', '..' and names holding '/' or NUL are
refused), so a hostile tree can never make `materialize` write outside its destination.
Symlinks are stored and recreated as symlinks, never followed: a link whose target
points outside the tree is materialized as that link and nothing is written through it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.errors import BlobNotFound, InvalidTree
from rbs.cas.store import BlobStore
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction


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


def digest_of(d: re_pb2.Digest, function: DigestFunction) -> Digest:
    try:
        return Digest(function=function, hash=d.hash, size=d.size_bytes)
    except ValueError as e:
        raise InvalidTree(str(e)) from None


def to_proto(d: Digest) -> re_pb2.Digest:
    return re_pb2.Digest(hash=d.hash, size_bytes=d.size)


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


def _store_node(store: BlobStore, node: _Node, function: DigestFunction) -> Digest:
    msg = re_pb2.Directory()
    for name in sorted(node.files):
        e = node.files[name]
        if e.symlink is not None:
            msg.symlinks.add(name=name, target=e.symlink)
        else:
            assert e.digest is not None
            msg.files.add(name=name, digest=to_proto(e.digest), is_executable=e.executable)
    for name in sorted(node.dirs):
        child = _store_node(store, node.dirs[name], function)
        msg.directories.add(name=name, digest=to_proto(child))
    return store.put_message(msg, function)


def build_tree(
    store: BlobStore,
    entries: Mapping[str, TreeEntry | None],
    *,
    function: DigestFunction = DEFAULT_FUNCTION,
) -> Digest:
    """Store the Directory messages for `entries` (relative path -> leaf, or None for an
    empty directory) and return the root digest. File blobs must already be stored."""
    root = _Node()
    for rel, entry in entries.items():
        if entry is not None and entry.digest is not None and entry.digest.function != function:
            raise InvalidTree(
                f"{rel!r} has a {entry.digest.function.value} digest in a {function.value} tree"
            )
        _insert(root, rel, entry)
    return _store_node(store, root, function)


def _scan(path: Path, rel: str, store: BlobStore, function: DigestFunction) -> TreeEntry | None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return TreeEntry(symlink=os.readlink(path))
    if stat.S_ISREG(st.st_mode):
        return TreeEntry(
            digest=store.put_file(path, function=function), executable=bool(st.st_mode & 0o111)
        )
    if stat.S_ISDIR(st.st_mode):
        return None
    raise InvalidTree(f"{rel!r} at {path} is not a regular file, directory or symlink")


def tree_from_path(
    store: BlobStore,
    path: Path,
    *,
    function: DigestFunction = DEFAULT_FUNCTION,
    select: Iterable[str] | None = None,
) -> Digest:
    """Store the tree rooted at `path` (all of it, or only the relative paths in
    `select`) with every file blob, and return the root Directory digest."""
    path = Path(path)
    if not path.is_dir():
        raise InvalidTree(f"{path} is not a directory")
    entries: dict[str, TreeEntry | None] = {}
    if select is not None:
        for rel in select:
            entries[rel] = _scan(path / rel, rel, store, function)
    else:
        for dirpath, dirnames, filenames in os.walk(path):
            base = os.path.relpath(dirpath, path)
            for name in dirnames + filenames:
                rel = name if base == "." else f"{base}/{name}"
                full = Path(dirpath) / name
                if name in dirnames and full.is_symlink():
                    entries[rel] = TreeEntry(symlink=os.readlink(full))
                else:
                    entries[rel] = _scan(full, rel, store, function)
    return build_tree(store, entries, function=function)


def read_directory(store: BlobStore, digest: Digest) -> re_pb2.Directory:
    msg = re_pb2.Directory()
    try:
        msg.ParseFromString(store.get(digest))
    except BlobNotFound:
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
                TreeEntry(digest=digest_of(f.digest, root.function), executable=f.is_executable),
            )
        for s in msg.symlinks:
            yield prefix + check_name(s.name, prefix or "/"), TreeEntry(symlink=s.target)
        for d in msg.directories:
            rel = prefix + check_name(d.name, prefix or "/")
            yield rel, None
            stack.append((rel + "/", digest_of(d.digest, root.function)))


def collect_directories(store: BlobStore, root: Digest) -> list[re_pb2.Directory]:
    """Every Directory message of the tree, root first (what GetTree and Tree need)."""
    out = []
    stack = [root]
    while stack:
        msg = read_directory(store, stack.pop())
        out.append(msg)
        stack.extend(digest_of(d.digest, root.function) for d in reversed(msg.directories))
    return out


def materialize(store: BlobStore, root: Digest, dest: Path, *, link: bool = True) -> None:
    """Recreate the tree under `dest` (created if needed; existing entries are an error).
    Files are hardlinked from the store where it can (`link`), else copied."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for rel, entry in walk_tree(store, root):
        target = dest / rel
        if entry is None:
            target.mkdir()
        elif entry.symlink is not None:
            os.symlink(entry.symlink, target)
        else:
            assert entry.digest is not None
            store.export_file(entry.digest, target, executable=entry.executable, link=link)
