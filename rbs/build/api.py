"""The build engine as a library: load a workspace, resolve patterns, analyse targets."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rbs.build.analysis import Analyzer
from rbs.build.errors import BuildError, closest
from rbs.build.graph import ActionGraph
from rbs.build.labels import Label, parse_pattern
from rbs.build.loader import Loader
from rbs.build.select import BuildConfig
from rbs.build.workspace import Workspace, find_root


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
) -> list[Label]:
    """Labels of the rule targets the patterns name, in a stable order.

    With `errors` (--keep-going), a package that fails to load is recorded there and
    skipped instead of ending the build."""
    out: dict[Label, None] = {}
    for text in patterns:
        pat = parse_pattern(text, cwd_package=cwd_package)
        for pkg_name in loader.ws.expand(pat):
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


def analyze(
    loader: Loader, labels: Iterable[Label], errors: list[BuildError] | None = None
) -> ActionGraph:
    """Analyse targets (and everything they depend on) into an action graph.

    With `errors` (--keep-going), a target that fails to analyse is recorded there and
    left out of the graph's requested targets; the others are analysed."""
    an = Analyzer(loader)
    for label in labels:
        try:
            an.resolve(label)
        except BuildError as e:
            if errors is None:
                raise
            errors.append(e)
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
