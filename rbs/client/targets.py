"""Job targets on the client: build `//pkg:target`, read its manifest, stage its input tree.

`rbs job submit //pkg:train` builds the target in the workspace around the current
folder; the build writes `rbs-out/pkg/train.job.json` (rbs.build.jobtarget) and stores
the job's input tree (binary, runfiles, data) in the workspace's build store
(`.rbs/cas`). Submitting reads that manifest, so `--manifest rbs-out/pkg/train.job.json`
and `//pkg:train` submit the same bytes, and stages the tree from the build store: one
find-missing call, then only the blobs the cluster lacks cross the wire.

`--inputs bin=//app:train` builds a target and stages its outputs (an executable with
its runfiles tree beside it, as `bin/train` and `bin/train.runfiles/`) under `bin/`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rbs.client.built import build_target, parse_target_label, workspace_of
from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient
from rbs.model import Digest, JobManifest


def build_job_target(target: str, *, cwd: Path | None = None) -> tuple[JobManifest, dict[str, str]]:
    """Build a job target; return its manifest (as the build wrote it) and provenance.

    `//pkg:target@REV` builds it as of git revision REV (rbs.client.versioned). The
    provenance holds, beside each field's source, the origin keys: the target label,
    the manifest's digest, and the workspace's git commit and dirtiness.
    """
    from rbs.client import versioned

    root, package = workspace_of(cwd or Path.cwd())
    text, rev = versioned.split_rev(target)
    label = parse_target_label(text, package)
    if rev is None:
        manifest, prov = _build_in(root, label)
        return manifest, prov | versioned.git_state(root)
    commit = versioned.resolve_rev(root, target, rev)
    with versioned.worktree_at(root, commit) as tree:
        manifest, prov = _build_in(tree, label)
    print(f"rbs: built {label} as of {rev} ({commit[:12]})", file=sys.stderr)
    return manifest, prov | {
        versioned.COMMIT_KEY: commit,
        versioned.DIRTY_KEY: "false",
        versioned.REV_KEY: rev,
    }


def _build_in(root: Path, label: Any) -> tuple[JobManifest, dict[str, str]]:
    from rbs.build.jobtarget import job_targets, manifest_path, target_provenance
    from rbs.client.versioned import MANIFEST_KEY, TARGET_KEY, manifest_digest
    from rbs.wire.manifest import manifest_from_json

    _result, graph = build_target(root, label)
    if label not in job_targets(graph, [label]):
        info = graph.targets[label]
        raise JobError(
            f"{label} is a {info.kind}, not a job target; declare a batch_job or "
            f'ml_training_job around it (load("@rbs//job/rules.rbs", ...)), or ship it with '
            f"--inputs bin={label} -- ./bin/{label.name}"
        )
    path = root / manifest_path(label)
    try:
        manifest = manifest_from_json(path.read_bytes())
    except OSError as e:
        raise JobError(f"{label}: cannot read its manifest {path}: {e.strerror}") from None
    print(f"rbs: built {label} -> {manifest_path(label)}", file=sys.stderr)
    origin = {TARGET_KEY: str(label), MANIFEST_KEY: str(manifest_digest(manifest))}
    return manifest, target_provenance(label) | origin


# ---------------------------------------------------------------- staging


def _local_store(start: Path) -> Any:
    from rbs.build.errors import BuildError
    from rbs.build.workspace import find_root
    from rbs.cas.disk import DiskStore

    try:
        root = find_root(start)
    except BuildError:
        return None
    cas = root / ".rbs" / "cas"
    return DiskStore(cas, durable=False) if cas.is_dir() else None


def _tree_blobs(store: Any, root: Digest) -> list[Digest]:
    """Every blob of a tree in `store`: its Directory messages and its files."""
    from rbs.cas.digests import digest_from_pb
    from rbs.cas.tree import read_directory

    out: dict[Digest, None] = {}
    stack = [root]
    while stack:
        d = stack.pop()
        out[d] = None
        msg = read_directory(store, d)
        for f in msg.files:
            out[digest_from_pb(f.digest, root.function)] = None
        stack.extend(digest_from_pb(c.digest, root.function) for c in msg.directories)
    return list(out)


def stage_manifest_inputs(
    client: JobsClient,
    manifest: JobManifest,
    *,
    source: Path | None = None,
    cwd: Path | None = None,
) -> int:
    """Make sure the cluster holds the manifest's input tree; returns the blobs uploaded.

    The tree is read from the build store of the workspace around `source` (the
    manifest file) or of `cwd` (default: the current folder); only blobs the cluster
    lacks are sent.
    """
    from rbs.client.http import HttpError
    from rbs.client.staging import find_missing, upload

    root = manifest.input_root
    if root is None:
        return 0
    starts = [source.resolve().parent] if source is not None else []
    starts.append(cwd or Path.cwd())
    stores = [s for s in (_local_store(p) for p in starts) if s is not None]
    store = next((s for s in stores if s.contains(root)), None)
    try:
        if store is None:
            if not find_missing(client.conn, [root]):
                return 0  # staged earlier (the tree is stored whole or not at all)
            raise JobError(
                f"input tree {root} of job {manifest.name!r} is neither on the cluster nor in "
                "a build store here; build the job target in its workspace "
                "(`rbs build //pkg:target`) and submit from there"
            )
        blobs = _tree_blobs(store, root)
        # The root last: a cluster that has the root Directory has everything under it.
        blobs.remove(root)
        blobs.append(root)
        missing = find_missing(client.conn, blobs)
        order = {d: i for i, d in enumerate(blobs)}
        missing.sort(key=order.__getitem__)
        upload(client.conn, {d: store.path_of(d) for d in missing})
    except HttpError as e:
        raise JobError(e.message) from None
    if missing:
        sent = sum(d.size for d in missing)
        print(
            f"rbs: staged {len(missing)} of {len(blobs)} blobs ({sent} bytes) of {root}",
            file=sys.stderr,
        )
    return len(missing)


def check_queue(client: JobsClient, manifest: JobManifest, provenance: Mapping[str, str]) -> None:
    """Refuse, with the fix, a queue the target chose that the cluster does not have."""
    source = provenance.get("queue", "")
    if not source.startswith("target"):
        return
    names = [str(q.get("name")) for q in client.queues()]
    if manifest.queue in names:
        return
    label = source.removeprefix("target ")
    raise JobError(
        f"{label} asks for partition {manifest.queue!r}, which is not a queue of the cluster "
        f"at {client.server} (queues: {', '.join(names)}). Define it in the server's TOML, "
        f'e.g. [jobs] queues = [{{ name = "batch" }}, {{ name = "{manifest.queue}" }}], '
        "and restart the server; or override it with --queue batch"
    )


# ---------------------------------------------------------------- --inputs DEST=//pkg:target


__all__ = [
    "build_job_target",
    "check_queue",
    "stage_manifest_inputs",
]
