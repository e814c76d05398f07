"""Built targets as job inputs: `--inputs DEST=//pkg:target` builds it and lays out its files.

Both the staging of `--inputs` and the submit of a job target build through here, so
the build engine is imported only when a `//` label is actually given.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rbs.client.errors import JobError
from rbs.model import Digest, DigestFunction


def workspace_of(cwd: Path) -> tuple[Path, str]:
    from rbs.build.errors import BuildError
    from rbs.build.workspace import find_root

    try:
        root = find_root(cwd)
    except BuildError as e:
        raise JobError(
            f"a //pkg:target needs a workspace: {e.message}; run from inside one "
            "(a folder with a WORKSPACE file)"
        ) from None
    rel = cwd.resolve().relative_to(root.resolve()).as_posix()
    return root, "" if rel == "." else rel


def parse_target_label(text: str, package: str) -> Any:
    from rbs.build.labels import parse_label

    try:
        return parse_label(text, package=package)
    except ValueError as e:
        raise JobError(f"{text}: {e}; write //pkg:name") from None


def build_target(root: Path, label: Any) -> tuple[Any, Any]:
    """Build one target; returns (BuildResult, ActionGraph), also when nothing changed."""
    from rbs.build.driver import BuildOptions, run_build
    from rbs.build.errors import BuildError
    from rbs.build.progress import make_progress
    from rbs.build.state import load_cached_analysis, request_key

    try:
        result = run_build(
            root,
            [str(label)],
            options=BuildOptions(listener=make_progress(not sys.stderr.isatty())),
        )
    except BuildError as e:
        raise JobError(f"building {label} failed:\n{e.render()}") from None
    if not result.ok:
        msgs = "\n".join(f.message for f in result.report.failures)
        raise JobError(f"building {label} failed:\n{msgs}")
    graph = result.graph
    if graph is None:
        # A no-op build skips analysis; its cached analysis is valid by definition.
        cached = load_cached_analysis(root, request_key([str(label)], "", "build"))
        if cached is None:
            from rbs.build.api import load_and_analyze

            cached = load_and_analyze(root, [str(label)])
        graph = cached[1]
    return result, graph


def _digest_of(root: Path, result: Any) -> Any:
    from rbs.build.engine import out_path
    from rbs.build.state import BuildState

    stats = BuildState.load(root).stats

    def digest_of(f: Any) -> tuple[Digest, bool]:
        have = result.report.digests.get(f.path)
        if have is not None:
            return have  # type: ignore[no-any-return]
        h, size, exe = stats.digest(root, f.path if f.is_source else out_path(f.path))
        return Digest(function=DigestFunction.BLAKE3, hash=h, size=size), exe

    return digest_of


def target_entries(
    spec: str, cwd: Path, function: DigestFunction
) -> tuple[dict[str, Any], dict[Digest, Path]]:
    """Tree entries for `--inputs [DEST=]//pkg:target`: its outputs (and runfiles) under DEST.

    An executable lands as DEST/<name> with DEST/<name>.runfiles/<workspace>/... beside
    it, so `-- ./DEST/<name>` runs it; other targets' output files land as DEST/<basename>.
    """
    from rbs.build.engine import out_path
    from rbs.cas.tree import TreeEntry

    dest, sep, text = spec.partition("=")
    if not sep:
        dest, text = "", spec
    dest = dest.strip("/")
    if function is not DigestFunction.BLAKE3:
        raise JobError(f"--inputs {spec!r}: built targets are hashed with blake3")
    root, package = workspace_of(cwd)
    label = parse_target_label(text, package)
    result, graph = build_target(root, label)
    info = graph.targets[label]
    layout: dict[str, Any] = {}
    if info.executable is not None:
        exe = info.executable
        layout[exe.basename] = exe
        for f in info.runfiles:
            layout[f"{exe.basename}.runfiles/{graph.workspace_name}/{f.short_path}"] = f
    else:
        for f in info.files:
            if f.basename in layout:
                raise JobError(
                    f"--inputs {spec!r}: {label} has two outputs named {f.basename!r}; "
                    "stage a filegroup of distinct names, or the files themselves"
                )
            layout[f.basename] = f
    if not layout:
        raise JobError(f"--inputs {spec!r}: {label} has no output files to stage")
    digest_of = _digest_of(root, result)
    entries: dict[str, Any] = {}
    sources: dict[Digest, Path] = {}
    for rel, f in layout.items():
        d, exe_bit = digest_of(f)
        entries[f"{dest}/{rel}" if dest else rel] = TreeEntry(digest=d, executable=exe_bit)
        sources.setdefault(d, root / (f.path if f.is_source else out_path(f.path)))
    return entries, sources


def is_target_input(spec: str) -> bool:
    _dest, sep, src = spec.partition("=")
    return (src if sep else spec).startswith("//")
