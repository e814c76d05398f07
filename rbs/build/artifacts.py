"""Built targets as store entries: what `rbs job submit` ships (outputs + runfiles tree)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rbs.build.driver import BuildOptions, BuildResult, run_build
from rbs.build.engine import out_path
from rbs.build.errors import BuildError
from rbs.build.graph import File
from rbs.build.labels import Label
from rbs.build.protos import re_pb2  # noqa: F401 (before rbs.cas: no grpc import)
from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry, build_tree
from rbs.model import Digest, DigestFunction


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetArtifacts:
    """One built target: its files and (for executables) its runfiles, all in the store."""

    label: Label
    files: Mapping[str, TreeEntry]  # short path -> entry
    executable: str | None  # short path of the program, if the target is executable
    runfiles: Mapping[str, TreeEntry]  # "<workspace>/<short path>" -> entry
    runfiles_root: Digest | None  # Directory digest of the runfiles tree


def build_artifacts(
    root: Path, patterns: Iterable[str], store: BlobStore, *, options: BuildOptions | None = None
) -> dict[Label, TargetArtifacts]:
    """Build targets and return their outputs and runfiles as entries of `store`.

    Every blob named in the result is in `store` when this returns (sources included),
    and each executable's runfiles tree is stored as Directory messages.
    """
    result = run_build(root, list(patterns), options=options or BuildOptions(), mode="run")
    if not result.ok:
        failed = ", ".join(str(f.spec.owner) for f in result.report.failures)
        raise BuildError(
            f"the build failed: {failed}", hint="run `rbs build` on these targets to see why"
        )
    return {label: artifacts_of(result, label, store) for label in result.labels}


def _entry(result: BuildResult, f: File, store: BlobStore) -> TreeEntry:
    digest, executable = result.digest_of(f)
    path = result.root / (f.path if f.is_source else out_path(f.path))
    if not store.contains(digest):
        store.put_file(path, function=DigestFunction.BLAKE3, expected=digest)
    return TreeEntry(digest=digest, executable=executable)


def artifacts_of(result: BuildResult, label: Label, store: BlobStore) -> TargetArtifacts:
    assert result.graph is not None
    info = result.graph.targets[label]
    files = {f.short_path: _entry(result, f, store) for f in info.files}
    runfiles: dict[str, TreeEntry] = {}
    tree: Digest | None = None
    if info.executable is not None:
        ws = result.graph.workspace_name
        runfiles = {f"{ws}/{f.short_path}": _entry(result, f, store) for f in info.runfiles}
        tree = build_tree(store, dict(runfiles), function=DigestFunction.BLAKE3)
    return TargetArtifacts(
        label=label,
        files=files,
        executable=info.executable.short_path if info.executable else None,
        runfiles=runfiles,
        runfiles_root=tree,
    )
