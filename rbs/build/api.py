"""The build engine as a library: load a workspace, resolve patterns, analyse targets."""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rbs.build.analysis import Analyzer
from rbs.build.errors import BuildError, closest
from rbs.build.graph import ActionGraph
from rbs.build.labels import Label, parse_pattern
from rbs.build.loader import Loader
from rbs.build.pkgcache import AnalysisCache, PackageRecord
from rbs.build.select import BuildConfig
from rbs.build.workspace import Workspace, find_root


@contextmanager
def few_collections() -> Iterator[None]:
    """Python's cyclic garbage collector held off while loading or analysis runs.

    Both make many long-lived objects (targets, infos, plain providers, actions) and
    next to no cyclic garbage (the values are plain data; Starlark's live outside
    Python's heap), so each full collection walks all of them for nothing: 15-20% of
    the analysis CPU at 20,001 targets. The collector is back on when they return."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def open_workspace(start: Path | None = None) -> Workspace:
    """The workspace containing `start` (default: the current folder)."""
    return Workspace(root=find_root(start or Path.cwd()))


def resolve_patterns(
    loader: Loader,
    patterns: Iterable[str],
    *,
    cwd_package: str = "",
    tests_only: bool = False,
    errors: list[BuildError] | None = None,
    cache: AnalysisCache | None = None,
) -> list[Label]:
    """Labels of the rule targets the patterns name, in a stable order.

    With `errors` (--keep-going), a package that fails to load is recorded there and
    skipped instead of ending the build. With `cache`, a package unchanged since it was
    recorded there is expanded from its record, without loading it."""
    with few_collections():
        return _resolve_patterns(loader, patterns, cwd_package, tests_only, errors, cache)


def _resolve_patterns(
    loader: Loader,
    patterns: Iterable[str],
    cwd_package: str,
    tests_only: bool,
    errors: list[BuildError] | None,
    cache: AnalysisCache | None,
) -> list[Label]:
    out: dict[Label, None] = {}
    for text in patterns:
        pat = parse_pattern(text, cwd_package=cwd_package)
        for pkg_name in loader.ws.expand(pat):
            rec = cache.summary(pkg_name) if cache is not None else None
            if rec is not None and _from_record(rec, pkg_name, pat.name, tests_only, out):
                continue
            try:
                pkg = loader.package(pkg_name)
            except BuildError as e:
                if errors is None:
                    raise
                errors.append(e)
                continue
            if pat.name is not None:
                if Label(package=pkg_name, name=pat.name) in loader.select_errors:
                    out[Label(package=pkg_name, name=pat.name)] = None
                    continue
                if pat.name not in pkg.targets and pat.name not in pkg.outputs:
                    if (loader.ws.root / pkg_name / pat.name).is_file():
                        out[Label(package=pkg_name, name=pat.name)] = None
                        continue
                    near = closest(pat.name, pkg.names())
                    raise BuildError(
                        f"no such target //{pkg_name}:{pat.name}",
                        hint=f"did you mean //{pkg_name}:{near}?"
                        if near
                        else f"see `rbs query //{pkg_name}:all`",
                    )
                out[Label(package=pkg_name, name=pat.name)] = None
                continue
            for name in sorted(pkg.targets):
                t = pkg.targets[name]
                if tests_only and not t.rule.test:
                    continue
                if "manual" in (t.attrs.get("tags") or ()):
                    continue  # as in Bazel: built only when named
                out[t.label] = None
            if not tests_only:
                # A select() that matched nothing fails its target when analysed.
                for label in loader.select_errors:
                    if label.package == pkg_name:
                        out[label] = None
    return list(out)


def _from_record(
    rec: PackageRecord, package: str, name: str | None, tests_only: bool, out: dict[Label, None]
) -> bool:
    """Expand a pattern over a recorded package; False when only loading can answer."""
    if name is not None:
        if name not in rec.outputs and not any(n == name for n, _, _ in rec.targets):
            return False  # a source file, or an error to explain: load the package
        out[Label(package=package, name=name)] = None
        return True
    for n, is_test, manual in rec.targets:
        if (is_test or not tests_only) and not manual:
            out[Label(package=package, name=n)] = None
    return True


def analyze(
    loader: Loader,
    labels: Iterable[Label],
    errors: list[BuildError] | None = None,
    cache: AnalysisCache | None = None,
) -> ActionGraph:
    """Analyse targets (and everything they depend on) into an action graph.

    With `errors` (--keep-going), a target that fails to analyse is recorded there and
    left out of the graph's requested targets; the others are analysed. With `cache`
    (rbs.build.pkgcache), clean targets are restored from it and fresh ones recorded."""
    an = Analyzer(loader, cache=cache)
    with few_collections():
        for label in labels:
            try:
                an.resolve(label)
            except BuildError as e:
                if errors is None:
                    raise
                errors.append(e)
    if cache is not None:
        cache.aspects_used = any(a._aspect_results for a in an._configs.values())
    return an.graph()


def load_and_analyze(
    root: Path,
    patterns: Iterable[str],
    *,
    cwd_package: str = "",
    config: BuildConfig | None = None,
) -> tuple[list[Label], ActionGraph]:
    """One call from files to graph: what `rbs build` does before running anything."""
    loader = Loader(Workspace(root=root))
    if config is not None:
        loader.config = config
    labels = resolve_patterns(loader, patterns, cwd_package=cwd_package)
    return labels, analyze(loader, labels)
