"""Tree artifacts (`ctx.actions.declare_directory`) on the execution side.

An output directory is stored as REAPI wants it: its files as blobs, its folders as
Directory messages, and one `Tree` message (root first, then every child) whose digest
the ActionResult names. The engine keeps the root Directory digest as the directory's
digest: it is what a later action's input root embeds and what `materialize` reads. A
result from another REAPI server may carry only the Tree, so its Directory messages are
put into the local store from it (`root_of`).

Inputs that are directories are expanded into their files in the input root, and
`args.add_all(directory)` markers (written by prelude.rbs at analysis, when the files
are not known yet) are expanded into one argument per file, in path order, as Bazel does.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rbs.build.protos import re_pb2
from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry, collect_directories, tree_from_path, walk_tree
from rbs.model import Digest, DigestFunction

DIR_MARKER = "\0rbs-dir\0"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputDir:
    """One output directory of a result: its Tree message and root Directory digests."""

    path: str  # exec-root relative
    tree: Digest
    root: Digest | None = None  # None: read it from the Tree (see root_of)


def tree_message(directories: list[re_pb2.Directory]) -> bytes:
    tree = re_pb2.Tree(root=directories[0], children=directories[1:])
    blob: bytes = tree.SerializeToString(deterministic=True)
    return blob


def store_output_dir(store: BlobStore, path: Path, rel: str, function: DigestFunction) -> OutputDir:
    """Store the directory an action wrote (files, Directory messages, Tree)."""
    root = tree_from_path(store, path, function=function)
    tree = store.put(tree_message(collect_directories(store, root)), function=function)
    return OutputDir(path=rel, tree=tree, root=root)


def root_of(store: BlobStore, out: OutputDir) -> Digest:
    """The root Directory digest of an output directory, its Directory messages stored."""
    if out.root is not None and store.contains(out.root):
        return out.root
    tree = re_pb2.Tree()
    tree.ParseFromString(store.get(out.tree))
    for child in tree.children:
        store.put_message(child, out.tree.function)
    return store.put_message(tree.root, out.tree.function)


def files_of(store: BlobStore, root: Digest) -> dict[str, TreeEntry | None]:
    """The entries of a stored directory: relative path -> file, or None for a folder."""
    return dict(walk_tree(store, root))


def expand_input_dirs(
    store: BlobStore,
    entries: dict[str, TreeEntry | None],
    dirs: Mapping[str, Digest],
    links: Iterable[tuple[str, str]] = (),
) -> dict[str, list[str]]:
    """Replace each input directory (and each runfiles link to one) by its files; return
    directory path -> its file paths (for argument expansion)."""
    listing: dict[str, list[str]] = {}
    for path, root in dirs.items():
        entries.pop(path, None)
        files = files_of(store, root)
        listing[path] = sorted(f"{path}/{rel}" for rel, e in files.items() if e is not None)
        entries[path] = None
        for rel, e in files.items():
            entries[f"{path}/{rel}"] = e
        for dest, src in links:
            if src == path:
                entries.pop(dest, None)
                entries[dest] = None
                for rel, e in files.items():
                    entries[f"{dest}/{rel}"] = e
    return listing


def expand_argv(argv: Iterable[str], listing: Mapping[str, list[str]]) -> tuple[str, ...]:
    """args.add_all(directory) markers -> one argument per file (format_each, before_each)."""
    out: list[str] = []
    for arg in argv:
        if not arg.startswith(DIR_MARKER):
            out.append(arg)
            continue
        path, fmt, before = arg[len(DIR_MARKER) :].split("\0")
        for f in listing.get(path, []):
            if before:
                out.append(before)
            out.append(fmt.replace("%s", f))
    return tuple(out)


def publish_dir(store: BlobStore, root: Digest, dest: Path, *, link: bool = True) -> None:
    """Lay out a directory under rbs-out/, replacing an older one whole (its files
    hardlinked from the store with `link`, else copied)."""
    from rbs.cas.tree import materialize

    tmp = dest.with_name(f".{dest.name}.rbs-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    materialize(store, root, tmp, link=link)
    old = dest.with_name(f".{dest.name}.rbs-old-{os.getpid()}")
    if dest.is_symlink() or dest.is_file():
        dest.unlink()
    elif dest.exists():
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)
