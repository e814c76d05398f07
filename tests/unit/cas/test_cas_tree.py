"""Merkle trees: round trips, executable bits, symlinks, and hostile trees refused."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.digests import digest_to_pb
from rbs.cas.disk import DiskStore
from rbs.cas.errors import BlobNotFound, InvalidTree
from rbs.cas.memory import MemoryStore
from rbs.cas.store import BlobStore
from rbs.cas.tree import (
    TreeEntry,
    build_tree,
    collect_directories,
    materialize,
    tree_from_path,
    walk_tree,
)
from rbs.model import Digest, DigestFunction


def snapshot(root: Path) -> dict[str, tuple[str, object]]:
    """Everything under `root`: kind, then bytes + exec bit, link target, or nothing."""
    out: dict[str, tuple[str, object]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st_ = p.lstat()
            if stat.S_ISLNK(st_.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st_.st_mode):
                out[rel] = ("dir", None)
            else:
                out[rel] = ("file", (p.read_bytes(), bool(st_.st_mode & 0o111)))
    return out


names = st.text(alphabet="abcxyz-_.é", min_size=1, max_size=6).filter(
    lambda n: n not in (".", "..")
)
leaves = st.one_of(
    st.tuples(st.just("file"), st.binary(max_size=64), st.booleans()),
    st.tuples(st.just("link"), st.sampled_from(["a", "../x", "/etc/passwd", "sub/b"])),
)
trees = st.recursive(
    st.dictionaries(names, leaves, max_size=4),
    lambda children: st.dictionaries(names, st.one_of(leaves, children), max_size=4),
    max_leaves=12,
)


def write_tree(root: Path, spec: dict[str, object]) -> None:
    root.mkdir(exist_ok=True)
    for name, node in spec.items():
        p = root / name
        if isinstance(node, dict):
            write_tree(p, node)
        elif node[0] == "file":  # type: ignore[index]
            _, data, exe = node  # type: ignore[misc]
            p.write_bytes(data)
            p.chmod(0o755 if exe else 0o644)
        else:
            os.symlink(node[1], p)  # type: ignore[index]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=trees, function=st.sampled_from(list(DigestFunction)), link=st.booleans())
def test_round_trip_keeps_bytes_modes_and_symlinks(
    spec: dict[str, object], function: DigestFunction, link: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = DiskStore(Path(tmp) / "store")
        src, dst = Path(tmp) / "src", Path(tmp) / "dst"
        write_tree(src, spec)
        root = tree_from_path(store, src, function=function)
        assert root.function is function
        assert tree_from_path(store, src, function=function) == root, "deterministic"
        materialize(store, root, dst, link=link)
        assert snapshot(dst) == snapshot(src)


def test_same_content_gives_same_digest_across_stores(tmp_path: Path) -> None:
    write_tree(tmp_path / "t", {"a": ("file", b"1", False), "d": {"b": ("link", "../a")}})
    assert tree_from_path(MemoryStore(), tmp_path / "t") == tree_from_path(
        DiskStore(tmp_path / "s"), tmp_path / "t"
    )


def test_empty_directories_are_kept(tmp_path: Path) -> None:
    (tmp_path / "src" / "empty" / "deeper").mkdir(parents=True)
    store = MemoryStore()
    materialize(store, tree_from_path(store, tmp_path / "src"), tmp_path / "dst")
    assert (tmp_path / "dst" / "empty" / "deeper").is_dir()


def test_symlinked_folders_are_stored_as_links_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("do not read")
    src = tmp_path / "src"
    src.mkdir()
    os.symlink(outside, src / "escape")
    store = MemoryStore()
    root = tree_from_path(store, src)
    assert dict(walk_tree(store, root)) == {"escape": TreeEntry(symlink=str(outside))}
    with pytest.raises(InvalidTree, match="symlink"):
        tree_from_path(store, src, select=["escape/secret"])


def test_select_limits_the_tree(tmp_path: Path) -> None:
    write_tree(
        tmp_path / "src",
        {
            "keep": ("file", b"k", False),
            "skip": ("file", b"s", False),
            "d": {"x": ("file", b"x", True)},
        },
    )
    store = MemoryStore()
    root = tree_from_path(store, tmp_path / "src", select=["keep", "d/x"])
    assert sorted(p for p, _ in walk_tree(store, root)) == ["d", "d/x", "keep"]
    with pytest.raises(InvalidTree, match="does not exist"):
        tree_from_path(store, tmp_path / "src", select=["gone"])


def test_special_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    os.mkfifo(tmp_path / "src" / "pipe")
    with pytest.raises(InvalidTree, match="not a regular file"):
        tree_from_path(MemoryStore(), tmp_path / "src")


def test_build_tree_from_memory(tmp_path: Path) -> None:
    store = MemoryStore()
    a = store.put(b"A")
    root = build_tree(
        store,
        {
            "bin/tool": TreeEntry(digest=a, executable=True),
            "lib/link": TreeEntry(symlink="../bin/tool"),
            "out": None,
        },
    )
    materialize(store, root, tmp_path / "m")
    assert snapshot(tmp_path / "m") == {
        "bin": ("dir", None),
        "lib": ("dir", None),
        "out": ("dir", None),
        "bin/tool": ("file", (b"A", True)),
        "lib/link": ("link", "../bin/tool"),
    }
    dirs = collect_directories(store, root)
    assert [d.directories[0].name for d in dirs[:1]] == ["bin"] and len(dirs) == 4


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "..", "a/./.."])
def test_build_tree_refuses_bad_paths(bad: str) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidTree):
        build_tree(store, {bad: TreeEntry(digest=store.put(b"x"))})


def test_build_tree_refuses_file_dir_conflicts_and_mixed_functions() -> None:
    store = MemoryStore()
    x = store.put(b"x")
    with pytest.raises(InvalidTree, match="both a file and a directory"):
        build_tree(store, {"a": TreeEntry(digest=x), "a/b": TreeEntry(digest=x)})
    with pytest.raises(InvalidTree, match="sha256 digest in a blake3 tree"):
        build_tree(store, {"a": TreeEntry(digest=store.put(b"x", function=DigestFunction.SHA256))})


def _hostile(store: BlobStore, **fields: object) -> Digest:
    return store.put_message(re_pb2.Directory(**fields))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../../etc", "x\0y"])
@pytest.mark.parametrize("kind", ["files", "directories", "symlinks"])
def test_hostile_names_cannot_escape_dest(tmp_path: Path, name: str, kind: str) -> None:
    store = MemoryStore()
    blob = store.put(b"pwned")
    empty_dir = store.put_message(re_pb2.Directory())
    node: object
    if kind == "files":
        node = re_pb2.FileNode(name=name, digest=digest_to_pb(blob))
    elif kind == "directories":
        node = re_pb2.DirectoryNode(name=name, digest=digest_to_pb(empty_dir))
    else:
        node = re_pb2.SymlinkNode(name=name, target="/tmp")
    inner = _hostile(store, **{kind: [node]})
    root = _hostile(
        store, directories=[re_pb2.DirectoryNode(name="sub", digest=digest_to_pb(inner))]
    )
    dest = tmp_path / "area" / "dest"
    with pytest.raises(InvalidTree, match="invalid path component"):
        materialize(store, root, dest)
    assert not dest.exists(), "a failed materialize into a new folder leaves nothing"
    assert sorted(p.name for p in (tmp_path / "area").iterdir()) == []


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    store = MemoryStore()
    blob = digest_to_pb(store.put(b"x"))
    root = _hostile(
        store,
        files=[re_pb2.FileNode(name="a", digest=blob)],
        symlinks=[re_pb2.SymlinkNode(name="a", target="/etc/passwd")],
    )
    with pytest.raises(InvalidTree, match="twice"):
        materialize(store, root, tmp_path / "dest")


def test_absolute_symlink_is_materialized_as_a_link_only(tmp_path: Path) -> None:
    store = MemoryStore()
    victim = tmp_path / "victim"
    victim.write_text("original")
    root = _hostile(store, symlinks=[re_pb2.SymlinkNode(name="l", target=str(victim))])
    materialize(store, root, tmp_path / "dest")
    assert os.readlink(tmp_path / "dest" / "l") == str(victim)
    assert victim.read_text() == "original"


def test_missing_blob_mid_materialize_names_the_path_and_cleans_up(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    write_tree(
        tmp_path / "src", {"a": ("file", b"here", False), "z": {"gone": ("file", b"lost", False)}}
    )
    root = tree_from_path(store, tmp_path / "src")
    store.delete(Digest.of(b"lost"))
    with pytest.raises(BlobNotFound, match="'z/gone'"):
        materialize(store, root, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    assert store.get(Digest.of(b"here")) == b"here", "the store is untouched"


def test_missing_directory_message(tmp_path: Path) -> None:
    with pytest.raises(BlobNotFound):
        materialize(MemoryStore(), Digest.of(b"no such tree"), tmp_path / "dest")


def test_not_a_directory_message(tmp_path: Path) -> None:
    store = MemoryStore()
    with pytest.raises(InvalidTree, match="not a valid Directory"):
        materialize(store, store.put(b"\xff\xff\xff garbage"), tmp_path / "dest")


def test_materialize_refuses_to_overwrite(tmp_path: Path) -> None:
    store = MemoryStore()
    root = build_tree(store, {"f": TreeEntry(digest=store.put(b"new"))})
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "f").write_text("mine")
    with pytest.raises(FileExistsError, match="'f' already exists"):
        materialize(store, root, tmp_path / "dest")
    assert (tmp_path / "dest" / "f").read_text() == "mine", "an existing folder is kept"


def test_materialize_hardlinks_from_disk(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "store")
    data = os.urandom(1000)
    root = build_tree(store, {"f": TreeEntry(digest=store.put(data))})
    materialize(store, root, tmp_path / "linked")
    materialize(store, root, tmp_path / "copied", link=False)
    blob = store.path_of(Digest.of(data))
    assert os.path.samefile(tmp_path / "linked" / "f", blob)
    assert not os.path.samefile(tmp_path / "copied" / "f", blob)
    shutil.rmtree(tmp_path / "linked")
    assert store.get(Digest.of(data)) == data


def test_many_files_take_the_parallel_path(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(300):
        p = src / f"d{i % 7}" / f"f{i}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"%d" % (i % 150))  # duplicates share a blob
    store = DiskStore(tmp_path / "store")
    root = tree_from_path(store, src)
    materialize(store, root, tmp_path / "dst")
    assert snapshot(tmp_path / "dst") == snapshot(src)
    assert store.stat().blobs == 150 + 8, "150 file blobs, 7 + 1 Directory messages"


def test_map_in_slices_keeps_order() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from rbs.cas.fileio import map_in_slices

    with ThreadPoolExecutor(3) as pool:
        assert map_in_slices(pool, lambda x: x * 2, list(range(101)), 4) == [
            x * 2 for x in range(101)
        ]


@pytest.mark.parametrize("target", ["", "a\0b"])
def test_unusable_symlink_targets_are_refused(tmp_path: Path, target: str) -> None:
    store = MemoryStore()
    root = _hostile(store, symlinks=[re_pb2.SymlinkNode(name="l", target=target)])
    with pytest.raises(InvalidTree, match="empty target or one holding NUL"):
        materialize(store, root, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
