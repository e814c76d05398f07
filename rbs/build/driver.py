"""`build`, `test` and the library call other parts use: patterns in, outputs out."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rbs.build.engine import (
    OUT_BIN,
    Backend,
    Engine,
    Listener,
    Report,
    needed_actions,
    out_path,
)
from rbs.build.errors import BuildError
from rbs.build.graph import CONFIG_BIN_DIRS, ActionGraph, File
from rbs.build.jobtarget import finish_job_targets, job_targets
from rbs.build.labels import Label
from rbs.build.select import BuildConfig
from rbs.build.state import (
    BuildState,
    load_cached_analysis_with_deps,
    no_gc,
    request_key,
    save_analysis,
)
from rbs.model import Digest

if TYPE_CHECKING:
    from rbs.build.pkgcache import AnalysisCache


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildOptions:
    """How to build: parallelism, failure policy, and which backend (local or remote)."""

    jobs: int = os.cpu_count() or 1
    keep_going: bool = False
    backend: Callable[[Path], Backend] | None = None  # default: the local store and runner
    listener: Listener | None = None
    test_timeout: int = 0  # seconds; 0: each test's own (from its size or timeout)
    # --output_groups, parsed (rbs.build.output_groups); () builds the default files.
    output_groups: tuple[str, ...] = ()
    # --define and build settings: what select() reads (rbs.build.select).
    config: BuildConfig = field(default_factory=BuildConfig)


@dataclass(slots=True, kw_only=True)
class BuildResult:
    labels: list[Label]
    graph: ActionGraph | None = None
    report: Report = field(default_factory=Report)
    up_to_date: bool = False
    analysis_cached: bool = False
    # Rule targets analysed afresh, and restored from the per-package analysis cache
    # (both 0 when the whole request's analysis was reused).
    analysed: int = 0
    restored: int = 0
    root: Path = Path()
    # Job targets' manifests written by this build: label -> rbs-out/<pkg>/<name>.job.json
    manifests: dict[Label, str] = field(default_factory=dict)
    # Loading and analysis errors survived with --keep-going (the build then fails).
    load_errors: list[BuildError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.load_errors

    def digest_of(self, f: File) -> tuple[Digest, bool]:
        """Digest and executable bit of a file this build made or read."""
        have = self.report.digests.get(f.path)
        if have is not None:
            return have
        from rbs.build.state import StatCache
        from rbs.model import DigestFunction

        h, size, exe = StatCache().digest(self.root, f.path if f.is_source else out_path(f.path))
        return Digest(function=DigestFunction.BLAKE3, hash=h, size=size), exe


def analysis_sources() -> list[str]:
    """Every module and Starlark file of rbs.build: the cached analysis depends on all
    of them, so an upgraded or edited rbs never reuses an old graph (a module left off
    a hand-kept list would)."""
    here = Path(__file__).resolve().parent
    return sorted(str(p) for p in here.iterdir() if p.suffix in (".py", ".rbs"))


def package_cache(root: Path, config: BuildConfig) -> AnalysisCache:
    """The per-package analysis cache of `root` for `config` (not read yet)."""
    from rbs.build.pkgcache import AnalysisCache
    from rbs.build.workspace import ROOT_FILES, rules_root

    globs = [*analysis_sources(), str(rules_root() / "bazel_tools" / "runfiles.bash")]
    globs += [str(root / n) for n in ROOT_FILES]
    return AnalysisCache(root, config.key(), globs)


def _analysis(
    root: Path,
    patterns: Sequence[str],
    cwd_package: str,
    request: str,
    tests_only: bool,
    config: BuildConfig | None = None,
    errors: list[BuildError] | None = None,
    stats: dict[str, int] | None = None,
) -> tuple[list[Label], ActionGraph, bool, list[str]]:
    """`_analyze_request` with no cyclic garbage collection: reading back tens of
    thousands of kept objects would make the collector walk them again and again (it
    runs once, when it is turned on again)."""
    with no_gc():
        return _analyze_request(
            root, patterns, cwd_package, request, tests_only, config, errors, stats
        )


def _analyze_request(
    root: Path,
    patterns: Sequence[str],
    cwd_package: str,
    request: str,
    tests_only: bool,
    config: BuildConfig | None = None,
    errors: list[BuildError] | None = None,
    stats: dict[str, int] | None = None,
) -> tuple[list[Label], ActionGraph, bool, list[str]]:
    """(labels, graph, whether it came from the cache, paths the analysis depends on).

    `stats` gets the counts of rule targets analysed and restored from the per-package
    cache (rbs.build.pkgcache) when the whole-request cache missed."""
    cached = load_cached_analysis_with_deps(root, request)
    if cached is not None:
        deps_read, payload = cached
        if (
            isinstance(payload, tuple)
            and len(payload) == 2
            and isinstance(payload[0], list)
            and isinstance(payload[1], ActionGraph)
        ):
            return payload[0], payload[1], True, deps_read
    from rbs.build.api import analyze, resolve_patterns
    from rbs.build.loader import Loader
    from rbs.build.workspace import ROOT_FILES, Workspace

    ws = Workspace(root=root)
    loader = Loader(ws)
    loader.config = config or BuildConfig()
    cache = package_cache(root, loader.config)
    cache.load(ws.packages())
    labels = resolve_patterns(
        loader, patterns, cwd_package=cwd_package, tests_only=tests_only, errors=errors, cache=cache
    )
    graph = analyze(loader, labels, errors, cache)
    if stats is not None:
        stats.update(analysed=cache.analysed, restored=cache.restored)
    if errors:
        # Only the targets that analysed; nothing is cached, so a fix is seen next time.
        labels = [x for x in labels if x in graph.targets]
        return labels, graph, False, []
    if not cache.aspects_used:
        cache.record_loaded(loader)
        cache.save()
    deps = set()
    for path in [*loader.files_read.values(), *map(Path, cache.used_files())]:
        try:
            deps.add(path.resolve().relative_to(root).as_posix())
        except ValueError:
            deps.add(str(path))
    dirs = ws.walked_dirs if ws._packages is not None else sorted({p for p in loader.packages})
    deps.update(d or "." for d in dirs)
    deps.update(d or "." for d in loader.packages)
    deps.update(loader.dirs_read)
    deps.update(analysis_sources())
    deps.add(next((n for n in ROOT_FILES if (root / n).exists()), "WORKSPACE"))
    save_analysis(root, request, deps, (labels, graph))
    return labels, graph, False, sorted(deps)


def run_build(
    root: Path,
    patterns: Sequence[str],
    *,
    options: BuildOptions,
    cwd_package: str = "",
    mode: str = "build",
) -> BuildResult:
    """Build (mode "build"), or build and test (mode "test"), the targets of `patterns`."""
    from rbs.build.labels import parse_pattern

    state = BuildState.load(root)
    # Absolute patterns name the same targets from any folder: key the request on them.
    patterns = [str(parse_pattern(p, cwd_package=cwd_package)) for p in patterns]
    cwd_package = ""
    groups = options.output_groups
    request = request_key(
        [
            *patterns,
            *(f"--output_groups={g}" for g in groups),
            *(f"--config:{options.config.key()}" for _ in [1] if options.config.key()),
        ],
        cwd_package,
        mode,
    )
    # Create the output folders first: adding them later would change the workspace
    # root's stat data, which the cached analysis depends on.
    (root / "rbs-out").mkdir(exist_ok=True)
    state.dir.mkdir(parents=True, exist_ok=True)
    if mode == "build" and state.is_noop(request):
        return BuildResult(labels=[], up_to_date=True, root=root)
    load_errors: list[BuildError] | None = [] if options.keep_going else None
    stats: dict[str, int] = {}
    labels, graph, cached, analysis_deps = _analysis(
        root,
        patterns,
        cwd_package,
        request,
        tests_only=mode == "test",
        config=options.config,
        errors=load_errors,
        stats=stats,
    )
    paths: list[str] = []
    tests: list[int] = []
    if groups:
        from rbs.build.output_groups import group_files
    test_owners = {a.owner: i for i, a in enumerate(graph.actions) if a.is_test}
    for label in labels:
        info = graph.targets[label]
        paths.extend(f.path for f in (group_files(info, groups) if groups else info.files))
        if info.executable is not None:
            paths.extend(f.path for f in info.runfiles)
            paths.extend(f.path for _, f in info.runfiles_links)
        if mode == "test" and label in test_owners:
            tests.append(test_owners[label])
    jobs = job_targets(graph, labels)
    for job in jobs.values():
        paths.extend(f.path for f in job.files())
    indices = needed_actions(graph, paths, tests=tests)
    factory = options.backend
    if factory is None:
        from rbs.build.backend import local_backend

        factory = local_backend
    engine = Engine(
        root,
        state,
        lambda: factory(root),
        jobs=options.jobs,
        keep_going=options.keep_going,
        listener=options.listener,
        test_timeout=options.test_timeout,
    )
    report = engine.run(graph, indices)
    report.hashed = state.stats.hashed
    result = BuildResult(
        labels=labels,
        graph=graph,
        report=report,
        analysis_cached=cached,
        analysed=stats.get("analysed", 0),
        restored=stats.get("restored", 0),
        root=root,
        load_errors=load_errors or [],
    )
    if report.ok:
        for label in labels:
            info = graph.targets[label]
            if info.executable is not None:
                write_runfiles_tree(root, graph, label)
        result.manifests = finish_job_targets(root, graph, jobs, report, state)
    if mode == "build" and result.ok:
        deps = _noop_paths(graph, indices, analysis_deps)
        # A job's data files need not be any action's input, and its manifest is not
        # an action output: both decide whether the build is a no-op.
        deps.extend(f.path for job in jobs.values() for f in job.files() if f.is_source)
        deps.extend(result.manifests.values())
        state.record_noop(request, deps)
    else:
        state.forget_noop(request)
    state.save()
    return result


def _noop_paths(graph: ActionGraph, indices: list[int], analysis_deps: list[str]) -> list[str]:
    paths = list(analysis_deps)
    for i in indices:
        a = graph.actions[i]
        paths.extend(p for p in a.inputs if not p.startswith(tuple(CONFIG_BIN_DIRS.values())))
        paths.extend(out_path(p) for p in a.outputs)
    return paths


def write_runfiles_tree(root: Path, graph: ActionGraph, label: Label) -> Path:
    """rbs-out/bin/<pkg>/<name>.runfiles/<workspace>/...: symlinks to sources and outputs."""
    info = graph.targets[label]
    assert info.executable is not None
    base = root / out_path(info.executable.path)
    rf = base.with_name(base.name + ".runfiles")
    ws_dir = rf / graph.workspace_name
    want: dict[Path, Path] = {}
    for f in info.runfiles:
        src = root / (f.path if f.is_source else out_path(f.path))
        want[ws_dir / f.short_path] = src
    for rel, f in info.runfiles_links:
        want[rf / rel] = root / (f.path if f.is_source else out_path(f.path))
    for link, src in want.items():
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            if link.is_symlink() and os.readlink(link) == str(src):
                continue
            link.unlink()
        except FileNotFoundError:
            pass
        os.symlink(src, link)
    return rf


__all__ = ["OUT_BIN", "BuildOptions", "BuildResult", "run_build", "write_runfiles_tree"]
