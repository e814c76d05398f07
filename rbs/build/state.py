"""Incremental state under `.rbs/`: a stat cache for sources and the no-op fast path.

The stat cache maps a path to (mtime_ns, size, inode, ctime_ns) and the digest it had,
so an unchanged file is never hashed again. The fast-path record lists every file and
folder a build looked at (BUILD and .rbs files, walked folders, sources, outputs under
rbs-out/) with its stat data: when all of them are unchanged the build is a no-op and
rbs returns without loading Starlark, protobuf or the store. This module imports only
the standard library and blake3 so that the check stays cheap.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import os
import pickle
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from rbs import __version__

FORMAT = 4
MAX_ENTRIES = 200_000  # per table; a few tens of MB at most
StatKey = tuple[int, int, int, int]  # mtime_ns, size, inode, ctime_ns


def stat_key(path: str | Path) -> StatKey | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)


def out_key(path: str | Path) -> StatKey | None:
    """Stat data of a published output, without ctime: hardlinking the same blob into a
    sandbox changes the inode's ctime but not the file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino, 0)


def _key(root: Path, rel: str) -> StatKey | None:
    return out_key(root / rel) if rel.startswith("rbs-out/") else stat_key(root / rel)


def request_key(patterns: Iterable[str], cwd_package: str, mode: str) -> str:
    """Names one kind of request (patterns + cwd + build/test/run) in the state.

    The rbs version is part of the key: another release never reuses a graph or a
    no-op record of this one, even where its files kept their stat data."""
    text = "\0".join([__version__, mode, cwd_package, *patterns])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _load(path: Path) -> Any:
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
    except Exception:  # a corrupt or foreign file is no cache: it is rebuilt
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return data.get("value")


def _save(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": FORMAT, "value": value}, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@dataclass(slots=True)
class StatCache:
    """path -> (stat key, digest hash, executable); hashes only files whose stat changed."""

    entries: dict[str, tuple[StatKey, str, int, bool]] = field(default_factory=dict)
    hashed: int = 0

    def digest(self, root: Path, rel: str) -> tuple[str, int, bool]:
        """(blake3 hex, size, executable) of a workspace file; raises OSError if missing."""
        full = root / rel
        st = os.stat(full)
        key = (st.st_mtime_ns, st.st_size, st.st_ino, st.st_ctime_ns)
        have = self.entries.get(rel)
        if have is not None and have[0] == key:
            return have[1], have[2], have[3]
        h = blake3.blake3()
        with open(full, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        value = (h.hexdigest(), st.st_size, bool(st.st_mode & 0o111))
        self.entries[rel] = (key, *value)
        self.hashed += 1
        return value


@dataclass(slots=True)
class BuildState:
    """Everything kept between builds of one workspace."""

    root: Path
    stats: StatCache = field(default_factory=StatCache)
    # action signature -> ((output path, digest text, executable), ...)
    memo: dict[str, tuple[tuple[str, str, bool], ...]] = field(default_factory=dict)
    # request key -> ((path, stat key or None), ...): the no-op fast path
    noop: dict[str, tuple[tuple[str, StatKey | None], ...]] = field(default_factory=dict)
    # rbs-out path -> stat data when rbs published it
    published: dict[str, StatKey | None] = field(default_factory=dict)
    # rbs-out path -> digest text of what rbs published there last: two actions (of two
    # configurations) may write one path, and only the last one's memo still holds.
    published_digest: dict[str, str] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.root / ".rbs" / "state"

    @classmethod
    def load(cls, root: Path) -> BuildState:
        st = cls(root=root)
        value = _load(st.dir / "state.pickle")
        if (
            isinstance(value, tuple)
            and len(value) == 5
            and all(isinstance(table, dict) for table in value)
        ):
            st.stats.entries, st.memo, st.noop, st.published, st.published_digest = value
        return st

    def save(self) -> None:
        # Entries are (re)inserted when used, so the oldest come first: drop those.
        for table in (self.memo, self.published, self.published_digest, self.stats.entries):
            extra = len(table) - MAX_ENTRIES
            if extra > 0:
                for key in list(itertools.islice(table, extra)):
                    del table[key]
        _save(
            self.dir / "state.pickle",
            (self.stats.entries, self.memo, self.noop, self.published, self.published_digest),
        )

    def is_noop(self, request: str) -> bool:
        """True when every path the last build of `request` looked at is unchanged."""
        rec = self.noop.get(request)
        if not rec:
            return False
        root = self.root
        return all(_key(root, p) == k for p, k in rec)

    def record_noop(self, request: str, paths: Iterable[str]) -> None:
        root = self.root
        self.noop[request] = tuple((p, _key(root, p)) for p in sorted(set(paths)))

    def forget_noop(self, request: str) -> None:
        self.noop.pop(request, None)


def load_cached_analysis(root: Path, request: str) -> Any:
    """The analysis saved for `request` if none of the files it read changed, else None."""
    found = load_cached_analysis_with_deps(root, request)
    return None if found is None else found[1]


def load_cached_analysis_with_deps(root: Path, request: str) -> tuple[list[str], Any] | None:
    """(paths the analysis read, analysis) if none of those files changed, else None.

    A path whose stat data changed is compared by content (`content_key`), so a
    touched or rewritten but equal BUILD file, or a folder whose entries came back
    as they were, keeps the cache. The file holds two pickles, the paths first, so a
    miss never reads the graph."""
    path = root / ".rbs" / "state" / f"analysis-{request}.pickle"
    with no_gc():
        try:
            with open(path, "rb") as f:
                head = pickle.load(f)
                deps = head.get("deps") if isinstance(head, dict) else None
                if head.get("format") != FORMAT or not isinstance(deps, tuple):
                    return None
                paths = _unchanged(root, deps)
                return None if paths is None else (paths, pickle.load(f))
        except Exception:  # a corrupt or foreign file is no cache: it is rebuilt
            return None


def _unchanged(root: Path, deps: tuple[Any, ...]) -> list[str] | None:
    paths: list[str] = []
    for dep in deps:
        if not (isinstance(dep, tuple) and len(dep) == 3 and isinstance(dep[0], str)):
            return None
        p, key, content = dep
        full = root / p
        if stat_key(full) != key and content_key(full) != content:
            return None
        paths.append(p)
    return paths


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """No cyclic garbage collection while a large pickle loads: it makes only new
    objects that are kept, and the collector would walk them again and again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def save_analysis(root: Path, request: str, deps: Iterable[str], payload: Any) -> None:
    rec = tuple((p, stat_key(root / p), content_key(root / p)) for p in sorted(set(deps)))
    path = root / ".rbs" / "state" / f"analysis-{request}.pickle"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump({"format": FORMAT, "deps": rec}, f, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def content_key(path: Path) -> str | None:
    """blake3 of a file's bytes, or of a folder's sorted entry names (what a glob or a
    package walk reads of it); None when it is missing or unreadable."""
    h = blake3.blake3()
    try:
        if path.is_dir():
            with os.scandir(path) as it:
                names = sorted(e.name + ("/" if e.is_dir() else "") for e in it)
            h.update("\0".join(names).encode())
            return "d" + str(h.hexdigest())
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return "f" + str(h.hexdigest())


def signature(parts: Iterable[str]) -> str:
    h = blake3.blake3()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return str(h.hexdigest())
