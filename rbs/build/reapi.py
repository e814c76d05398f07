"""The REAPI edge of the build: ActionSpec -> Command, input root, Action (and back)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rbs.build.graph import ActionSpec
from rbs.build.protos import re_pb2
from rbs.build.trees import OutputDir
from rbs.cas.digests import digest_from_pb, digest_to_pb
from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry, build_tree
from rbs.model import Digest, DigestFunction

FUNCTION = DigestFunction.BLAKE3
PLATFORM = (("OSFamily", "Linux"),)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedAction:
    """An action as stored in the CAS: its digest is the action-cache key."""

    digest: Digest
    action: re_pb2.Action
    command: re_pb2.Command
    input_root: Digest
    spec: ActionSpec
    # The input root as a flat map (path -> file, or None for an empty folder). Only a
    # local runner may use it, to skip reading the tree back from the store.
    entries: Mapping[str, TreeEntry | None] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputFile:
    path: str  # exec-root relative
    digest: Digest
    executable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecResult:
    """What running (or finding in the cache) one action produced."""

    exit_code: int
    outputs: tuple[OutputFile, ...]
    stdout: bytes = b""
    stderr: bytes = b""
    cached: bool = False
    missing: tuple[str, ...] = ()  # declared outputs the action did not create
    dirs: tuple[OutputDir, ...] = ()  # output directories (tree artifacts)


def _platform() -> re_pb2.Platform:
    p = re_pb2.Platform()
    for name, value in PLATFORM:
        p.properties.add(name=name, value=value)
    return p


def _rel(path: str, workdir: str) -> str:
    return path[len(workdir) + 1 :] if workdir and path.startswith(workdir + "/") else path


def prepare(
    store: BlobStore,
    spec: ActionSpec,
    inputs: Mapping[str, TreeEntry | None],
    *,
    function: DigestFunction = FUNCTION,
) -> PreparedAction:
    """Store Command, input root and Action for a "run" action; return the Action digest.
    `function` is the server's digest function (the inputs' digests must use it too)."""
    cmd = re_pb2.Command(
        arguments=list(spec.argv),
        output_files=sorted(
            _rel(p, spec.working_directory) for p in spec.outputs if p not in spec.output_dirs
        ),
        output_directories=sorted(_rel(p, spec.working_directory) for p in spec.output_dirs),
        working_directory=spec.working_directory,
        platform=_platform(),
    )
    for name, value in spec.env:
        cmd.environment_variables.add(name=name, value=value)
    entries: dict[str, TreeEntry | None] = dict(inputs)
    for out in spec.outputs:
        # Output folders exist before the command runs, as in Bazel.
        parent = out.rpartition("/")[0]
        if parent and parent not in entries:
            entries[parent] = None
    for out in spec.output_dirs:
        entries[out] = None  # a tree artifact's folder exists before the command, as in Bazel
    if spec.working_directory and spec.working_directory not in entries:
        entries[spec.working_directory] = None
    minimal = _minimal(entries)
    root = build_tree(store, minimal, function=function)
    cmd_digest = store.put_message(cmd, function)
    action = re_pb2.Action(
        command_digest=digest_to_pb(cmd_digest),
        input_root_digest=digest_to_pb(root),
        platform=_platform(),
    )
    if spec.timeout_s:
        action.timeout.seconds = spec.timeout_s
    return PreparedAction(
        digest=store.put_message(action, function),
        action=action,
        command=cmd,
        input_root=root,
        spec=spec,
        entries=minimal,
    )


def _minimal(entries: dict[str, TreeEntry | None]) -> dict[str, TreeEntry | None]:
    # An empty-folder entry is redundant when a file lies below it; keep the tree canonical.
    parents = {p.rpartition("/")[0] for p, e in entries.items()}
    full: set[str] = set()
    for p in parents:
        while p and p not in full:
            full.add(p)
            p = p.rpartition("/")[0]
    return {p: e for p, e in entries.items() if e is not None or p not in full}


def to_result(res: ExecResult, workdir: str = "") -> re_pb2.ActionResult:
    ar = re_pb2.ActionResult(exit_code=res.exit_code, stdout_raw=res.stdout, stderr_raw=res.stderr)
    for o in res.outputs:
        ar.output_files.add(
            path=_rel(o.path, workdir), digest=digest_to_pb(o.digest), is_executable=o.executable
        )
    for d in res.dirs:
        od = ar.output_directories.add(path=_rel(d.path, workdir), tree_digest=digest_to_pb(d.tree))
        if d.root is not None:
            od.root_directory_digest.CopyFrom(digest_to_pb(d.root))
    return ar


def from_result(ar: re_pb2.ActionResult, workdir: str = "", *, cached: bool = False) -> ExecResult:
    outs = tuple(
        OutputFile(
            path=f"{workdir}/{f.path}" if workdir else f.path,
            digest=digest_from_pb(f.digest, FUNCTION),
            executable=f.is_executable,
        )
        for f in ar.output_files
    )
    dirs = tuple(
        OutputDir(
            path=f"{workdir}/{d.path}" if workdir else d.path,
            tree=digest_from_pb(d.tree_digest, FUNCTION),
            root=digest_from_pb(d.root_directory_digest, FUNCTION)
            if d.root_directory_digest.hash
            else None,
        )
        for d in ar.output_directories
    )
    return ExecResult(
        exit_code=ar.exit_code,
        outputs=outs,
        stdout=ar.stdout_raw,
        stderr=ar.stderr_raw,
        cached=cached,
        dirs=dirs,
    )
