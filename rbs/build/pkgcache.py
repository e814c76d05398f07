"""The analysis kept per package and configuration, so an edit re-analyses only what it reaches.

A build that missed the whole-request cache (`state.load_cached_analysis_with_deps`)
still finds here, per configuration of the build (`BuildConfig.key`), what earlier
builds recorded (one file per package, see `AnalysisCache`):

- packages: for each loaded package, the files its loading read (its BUILD file, every
  module it loaded, transitively, and the folders its globs listed) with their stat data
  and content key, the packages its loading read (a `select()` names a `config_setting`
  elsewhere), and its targets (name, test, manual) and output names, which is what
  pattern expansion needs;
- entries: for each (configuration, label) analysed, its `TargetInfo`, its plain form
  (what dependents' implementations see), the actions its own implementation added,
  and the labels it resolved while it ran (its dependency edges).

Every record has a stamp: the build number that made it. An edge keeps the stamp its
target had, and an entry keeps its package's, so a package loaded again with a
change, or a dependency analysed again, makes every record that read the old one stale,
even one that this build did not visit. A package is clean when its files are unchanged
(by stat data, else by content: `state.content_key`) and the packages its loading read
are clean; an entry is clean when its package and every edge are clean. A clean entry
is restored without loading its package or running its implementation. So an edit to a
BUILD file re-analyses that package's targets and their reverse dependencies; an edit to
a `.bzl` file loaded by many packages, all of them.

Everything is dropped when what every analysis reads changes: the rbs version, the
`rbs/build` modules, the workspace's root files, or the set of packages (a new BUILD file
changes which package owns a path). Aspects are the one thing not kept: their results
are shared between the targets that apply them, so a build that applied one saves
nothing; it still restores what is clean.
"""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rbs import __version__
from rbs.build.graph import ActionSpec, TargetInfo, _reduce
from rbs.build.labels import Label
from rbs.build.state import StatKey, content_key, stat_key

FORMAT = 1
Key = tuple[str, Label]  # (configuration, label)
FileDep = tuple[str, StatKey | None, str | None]  # absolute path, stat data, content key


@dataclass(frozen=True, slots=True)
class PackageRecord:
    __reduce__ = _reduce
    stamp: int
    files: tuple[FileDep, ...]
    loads: tuple[tuple[str, int], ...]  # packages read while loading it, with their stamps
    targets: tuple[tuple[str, bool, bool], ...]  # (name, is a test, tagged manual)
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Entry:
    __reduce__ = _reduce
    stamp: int
    package: tuple[str, int]
    info: TargetInfo
    plain: dict[str, Any]
    actions: tuple[ActionSpec, ...]
    edges: tuple[tuple[str, Label, int], ...]  # (configuration, label, its stamp)
    packages: tuple[tuple[str, int], ...] = ()  # other packages read (toolchains)
    source: str = ""  # a source file's absolute path: it must still be a file


@dataclass(slots=True)
class Frame:
    """What one fresh analysis of a target read while it ran (kept by the analyser)."""

    key: Key
    edges: list[Key] = field(default_factory=list)
    packages: set[str] = field(default_factory=set)


@dataclass(slots=True)
class LoadDeps:
    """What each package's loading read, recorded by the loader as it goes."""

    stack: list[str] = field(default_factory=list)
    modules: dict[str, set[Label]] = field(default_factory=dict)  # package -> loads
    module_loads: dict[Label, set[Label]] = field(default_factory=dict)
    packages: dict[str, set[str]] = field(default_factory=dict)  # package -> packages
    dirs: dict[str, list[str]] = field(default_factory=dict)  # package -> folders listed

    def module(self, loading: Label | None, label: Label) -> None:
        if loading is not None:
            self.module_loads.setdefault(loading, set()).add(label)
        elif self.stack:
            self.modules.setdefault(self.stack[-1], set()).add(label)

    def package(self, name: str) -> None:
        if self.stack and self.stack[-1] != name:
            self.packages.setdefault(self.stack[-1], set()).add(name)

    def closure(self, package: str) -> set[Label]:
        seen: set[Label] = set()
        todo = list(self.modules.get(package, ()))
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(self.module_loads.get(m, ()))
        return seen


@dataclass(slots=True)
class _Checks:
    """Memoised answers of one build: is this path, package, entry unchanged?"""

    files: dict[str, bool] = field(default_factory=dict)
    packages: dict[str, bool] = field(default_factory=dict)
    entries: dict[Key, bool] = field(default_factory=dict)


def _file_dep(path: str) -> FileDep:
    p = Path(path)
    return (path, stat_key(p), content_key(p))


class AnalysisCache:
    """The per-package tables of one workspace and configuration (see the module doc).

    On disk, a folder per configuration: `index.pickle` (the build number, the files
    every analysis reads and the package list) and one file per package (its record
    and its entries), read when first needed and written only when it changed."""

    def __init__(self, root: Path, config_key: str, global_files: Iterable[str]) -> None:
        import hashlib

        name = hashlib.sha256(f"{__version__}\0{config_key}".encode()).hexdigest()[:24]
        self.dir = root / ".rbs" / "state" / f"packages-{name}"
        self.global_files = sorted(set(global_files))
        self.stamp = 1
        self._valid = False  # whether the folder's package files may be read
        self._shards: dict[str, tuple[PackageRecord | None, dict[Key, Entry]]] = {}
        self.packages: dict[str, PackageRecord] = {}  # what this build keeps
        self.entries: dict[Key, Entry] = {}
        self.package_list: tuple[str, ...] | None = None
        self._checks = _Checks()
        # This build's fresh analyses: key -> (entry, edges); and its counters of rule
        # targets analysed and restored, which tests and the benchmark read.
        self.fresh: dict[Key, tuple[Entry, list[Key]]] = {}
        self.analysed = 0
        self.restored = 0
        self.aspects_used = False
        self.visited: set[str] = set()  # packages this build restored from or loaded

    # -- reading ----------------------------------------------------------------------

    def load(self, package_list: list[str]) -> None:
        """Read the index. When it is missing, corrupt or of another world, the package
        files are removed: build numbers start again, and no old record may match one."""
        self.package_list = tuple(package_list)
        try:
            with open(self.dir / "index.pickle", "rb") as f:
                fmt, stamp, globs, pkg_list = pickle.load(f)
            if fmt != FORMAT or not isinstance(stamp, int) or not isinstance(globs, tuple):
                raise ValueError("another format")
        except Exception:  # a torn, corrupt or foreign file is no cache
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        self.stamp = stamp + 1
        if (
            pkg_list != self.package_list
            or [g[0] for g in globs] != self.global_files
            or not all(self._file_ok(g) for g in globs)
        ):
            # Another package set or another rbs: every record may be wrong, visited by
            # this build or not. The build number goes on from the index's.
            for p in self.dir.glob("*.pickle"):
                if p.name != "index.pickle":
                    p.unlink(missing_ok=True)
            return
        self._valid = True

    def _shard(self, package: str) -> tuple[PackageRecord | None, dict[Key, Entry]]:
        got = self._shards.get(package)
        if got is None:
            got = (None, {})
            if self._valid:
                try:
                    with open(self._shard_path(package), "rb") as f:
                        fmt, name, rec, entries = pickle.load(f)
                    if (
                        fmt == FORMAT
                        and name == package
                        and isinstance(rec, PackageRecord)
                        and isinstance(entries, dict)
                        and all(isinstance(e, Entry) for e in entries.values())
                    ):
                        got = (rec, entries)
                except Exception:  # missing, torn or foreign: nothing kept for it
                    pass
            self._shards[package] = got
        return got

    def _shard_path(self, package: str) -> Path:
        import hashlib

        return self.dir / (hashlib.sha256(package.encode()).hexdigest()[:32] + ".pickle")

    def _old_record(self, package: str) -> PackageRecord | None:
        return self._shard(package)[0]

    def _old_entry(self, key: Key) -> Entry | None:
        return self._shard(key[1].package)[1].get(key)

    def _file_ok(self, dep: FileDep) -> bool:
        path, key, content = dep
        ok = self._checks.files.get(path)
        if ok is None:
            p = Path(path)
            ok = stat_key(p) == key or content_key(p) == content
            self._checks.files[path] = ok
        return ok

    def package_clean(self, name: str) -> bool:
        ok = self._checks.packages.get(name)
        if ok is None:
            rec = self._old_record(name)
            self._checks.packages[name] = False  # a loop of loads is no proof
            ok = rec is not None and all(self._file_ok(f) for f in rec.files)
            ok = ok and all(self._stamped(p, s) for p, s in rec.loads)  # type: ignore[union-attr]
            self._checks.packages[name] = ok
        return ok

    def _stamped(self, package: str, stamp: int) -> bool:
        rec = self._old_record(package)
        return rec is not None and rec.stamp == stamp and self.package_clean(package)

    def clean(self, key: Key) -> Entry | None:
        """The entry of `key` if it and everything it read are unchanged, else None."""
        e = self._old_entry(key)
        if e is None:
            return None
        ok = self._checks.entries.get(key)
        if ok is None:
            self._checks.entries[key] = False
            ok = (
                self._stamped(*e.package)
                and all(self._stamped(p, s) for p, s in e.packages)
                and (not e.source or Path(e.source).is_file())
                and all(self._edge_ok(c, lab, s) for c, lab, s in e.edges)
            )
            self._checks.entries[key] = ok
        return e if ok else None

    def _edge_ok(self, config: str, label: Label, stamp: int) -> bool:
        if stamp < 0:
            return True  # not kept (rbs's own @bazel_tools targets): made again each time
        e = self._old_entry((config, label))
        return e is not None and e.stamp == stamp and self.clean((config, label)) is not None

    def summary(self, package: str) -> PackageRecord | None:
        """What pattern expansion needs of a clean package, without loading it."""
        return self._old_record(package) if self.package_clean(package) else None

    # -- writing ----------------------------------------------------------------------

    def keep_restored(self, key: Key, entry: Entry) -> None:
        self.entries[key] = entry
        for pkg in (entry.package[0], *(p for p, _ in entry.packages)):
            rec = self._old_record(pkg)
            if pkg not in self.packages and rec is not None:
                self.packages[pkg] = rec
                self.visited.add(pkg)

    def package_stamp(self, name: str) -> int:
        rec = self.packages.get(name)
        return rec.stamp if rec is not None else -1

    def record_package(
        self, name: str, files: Iterable[str], loads: Iterable[str], pkg: Any
    ) -> None:
        """A package loaded by this build; it keeps its old stamp if nothing changed."""
        old = self._old_record(name)
        stamp = old.stamp if old is not None and self.package_clean(name) else self.stamp
        self.visited.add(name)
        self.packages[name] = PackageRecord(
            stamp=stamp,
            files=tuple(_file_dep(f) for f in sorted(set(files))),
            loads=tuple((p, -1) for p in sorted(set(loads))),  # stamps filled by save()
            targets=tuple(
                (n, t.rule.test, "manual" in (t.attrs.get("tags") or ()))
                for n, t in sorted(pkg.targets.items())
            ),
            outputs=tuple(sorted(pkg.outputs)),
        )

    def record_loaded(self, loader: Any) -> None:
        """Record every package `loader` (a `rbs.build.loader.Loader`) loaded, but those
        with a select() that matched nothing: they fail the targets that use them."""
        root = loader.ws.root
        failed = {label.package for label in loader.select_errors}
        for name, pkg in loader.packages.items():
            if name in failed:
                continue
            files = [str(root / pkg.build_file)]
            for m in loader.deps.closure(name):
                path = loader.files_read.get(f"@{m.repo}//{m.path}" if m.repo else m.path)
                if path is not None:
                    files.append(str(path))
            files.extend(str(root / d) for d in loader.deps.dirs.get(name, ()))
            self.record_package(name, files, loader.deps.packages.get(name, ()), pkg)

    def save(self) -> None:
        """Write the index, then the file of every package this build loaded or
        analysed afresh: its record, the entries it kept that are still of that record,
        and the fresh ones with the stamps of what their edges name now."""
        self.dir.mkdir(parents=True, exist_ok=True)
        globs = tuple(_file_dep(g) for g in self.global_files)
        # The index first: a crash before the package files leaves the build number
        # ahead of them, never behind (a number used twice could match a stale edge).
        _save_raw(self.dir / "index.pickle", (FORMAT, self.stamp, globs, self.package_list))
        for key, (e, _) in self.fresh.items():
            self.entries[key] = e
        changed: dict[str, dict[Key, Entry]] = {}
        for key, (e, edges) in self.fresh.items():
            stamped = tuple(
                (c, lab, self.entries[(c, lab)].stamp if (c, lab) in self.entries else -1)
                for c, lab in edges
            )
            pkg = e.package[0]
            entry = Entry(
                stamp=e.stamp,
                package=(pkg, self.package_stamp(pkg)),
                info=e.info,
                plain=e.plain,
                actions=e.actions,
                edges=stamped,
                packages=tuple((p, self.package_stamp(p)) for p, _ in e.packages),
                source=e.source,
            )
            self.entries[key] = entry
            changed.setdefault(pkg, {})[key] = entry
        fresh_records = {n for n in self.packages if self._old_record(n) is not self.packages[n]}
        for name in fresh_records | set(changed):
            rec = self.packages.get(name)
            if rec is None:
                continue  # not recorded (a select() matched nothing): never clean
            if any(s < 0 for _, s in rec.loads):
                rec = PackageRecord(
                    stamp=rec.stamp,
                    files=rec.files,
                    loads=tuple((p, self.package_stamp(p)) for p, _ in rec.loads),
                    targets=rec.targets,
                    outputs=rec.outputs,
                )
            kept = {k: e for k, e in self._shard(name)[1].items() if e.package[1] == rec.stamp}
            kept.update(changed.get(name, {}))
            _save_raw(self._shard_path(name), (FORMAT, name, rec, kept))

    def used_files(self) -> set[str]:
        """Every file and folder the kept packages read (for the whole-request cache)."""
        return {f[0] for n in self.visited for f in self.packages[n].files}


def _save_raw(path: Path, value: Any) -> None:
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


__all__ = ["AnalysisCache", "Entry", "Frame", "LoadDeps", "PackageRecord"]
