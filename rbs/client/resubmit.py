"""`rbs job resubmit ID`: run a job's manifest and input root again, from anywhere.

The cluster keeps every job's manifest (with its input root's digest) and provenance,
and its CAS keeps the input trees of jobs in history for `[cas] keep_inputs`. So a
resubmit needs no checkout: it reads the job back, layers the given flags over its
manifest, asks the environment again for the secrets it names, and submits it. When
the tree is gone from the cluster but a build store here still has it, its missing
blobs are staged again; otherwise the error names every input that is gone.

Times are absolute in a manifest (a relative `--begin 30m` was resolved when the job
was submitted), so a begin time or a deadline that has passed is dropped, with a note:
carried over, a past deadline would cancel the new job at once. One still ahead is
kept, with a note that says so. A `--begin` or `--deadline` given to the resubmit
replaces either (`--begin ""` clears the begin time).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rbs.client.errors import JobError
from rbs.client.http import HttpConnection, HttpError
from rbs.client.jobs import JobsClient
from rbs.client.versioned import COMMIT_KEY, RESUBMIT_KEY, TARGET_KEY
from rbs.model import Digest, JobManifest

# At most this many gone inputs are named one by one; the rest are counted.
NAMED_MISSING = 20


def missing_inputs(conn: HttpConnection, root: Digest) -> list[str]:
    """The paths in the tree `root` whose blobs the cluster lacks ("." for the root folder).

    The tree is walked from the cluster's own copy: each Directory present is read, the
    ones absent are named with their path, and every file is checked in one call.
    """
    from rbs.cas.digests import digest_from_pb
    from rbs.cas.memory import MemoryStore
    from rbs.cas.tree import read_directory
    from rbs.client.fetch import _get
    from rbs.client.staging import find_missing

    gone: list[str] = []
    if find_missing(conn, [root]):
        return ["."]
    store = MemoryStore()
    files: dict[Digest, list[str]] = {}
    level = [("", root)]
    while level:  # one level of folders per round; bounded by the tree's depth
        subdirs: list[tuple[str, Digest]] = []
        for path, d in level:
            store.put(_get(conn, d), expected=d)
            msg = read_directory(store, d)
            for f in msg.files:
                files.setdefault(digest_from_pb(f.digest, root.function), []).append(path + f.name)
            subdirs += [
                (f"{path}{c.name}/", digest_from_pb(c.digest, root.function))
                for c in msg.directories
            ]
        absent = set(find_missing(conn, [d for _, d in subdirs]))
        gone += [p.rstrip("/") + "/" for p, d in subdirs if d in absent]
        level = [(p, d) for p, d in subdirs if d not in absent]
    for d in find_missing(conn, list(files)):
        gone += files[d]
    return sorted(gone)


def _gone_message(job_id: str, root: Digest, gone: list[str], prov: Mapping[str, str]) -> str:
    if gone == ["."]:
        what = f"its whole input tree {root} (the root folder itself)"
    else:
        named = ", ".join(gone[:NAMED_MISSING])
        more = f" and {len(gone) - NAMED_MISSING} more" if len(gone) > NAMED_MISSING else ""
        what = f"{len(gone)} of its inputs ({named}{more}) of input tree {root}"
    again = "rebuild and submit it from its workspace"
    target, commit = prov.get(TARGET_KEY), prov.get(COMMIT_KEY)
    if target and commit:
        again = f"rebuild it: rbs job submit {target}@{commit[:12]} (from a checkout)"
    elif target:
        again = f"rebuild it: rbs job submit {target} (from its workspace)"
    return (
        f"job {job_id}: the cluster no longer has {what}; they were evicted after the "
        f"[cas] keep_inputs time of the server. To run it again, {again}"
    )


def restage_or_explain(
    client: JobsClient, job_id: str, manifest: JobManifest, prov: Mapping[str, str], cwd: Path
) -> None:
    """Make sure the cluster holds the job's input tree, or raise naming what is gone."""
    from rbs.client.targets import stage_manifest_inputs

    root = manifest.input_root
    if root is None:
        return
    try:
        gone = missing_inputs(client.conn, root)
    except HttpError as e:
        raise JobError(e.message) from None
    if not gone:
        return
    try:
        stage_manifest_inputs(client, manifest, cwd=cwd)  # from a build store here, if any
    except JobError:
        raise JobError(_gone_message(job_id, root, gone, prov)) from None
    still = missing_inputs(client.conn, root)
    if still:
        raise JobError(_gone_message(job_id, root, still, prov))


def job_manifest(client: JobsClient, job_id: str) -> tuple[JobManifest, dict[str, str]]:
    """The manifest and provenance the cluster keeps for job `job_id`."""
    from rbs.wire.manifest import manifest_from_json

    raw = client.show(job_id).raw
    manifest = manifest_from_json(json.dumps(raw.get("manifest") or {}))
    prov = {str(k): str(v) for k, v in (raw.get("provenance") or {}).items()}
    return manifest, prov


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(ts))


def carried_times(
    manifest: JobManifest, flags: Mapping[str, Any], now: float
) -> tuple[JobManifest, list[str]]:
    """The manifest less a begin time or deadline that has passed (unless `flags` give a
    new one), and the notes that say what was dropped or kept."""
    notes: list[str] = []
    drop: set[str] = set()
    for field, flag, what in (
        ("begin_time", "begin", "begin time"),
        ("deadline", "deadline", "deadline"),
    ):
        at = getattr(manifest, field)
        if at is None or flags.get(flag) is not None:
            continue
        if at <= now:
            drop.add(field)
            notes.append(f"the job's {what} ({_when(at)}) has passed; the new job has none")
        else:
            notes.append(
                f"the new job keeps the {what} {_when(at)} (--{flag} replaces it"
                + (', --begin "" clears it)' if flag == "begin" else ")")
            )
    if drop:
        manifest = dataclasses.replace(
            manifest,
            begin_time=None if "begin_time" in drop else manifest.begin_time,
            deadline=None if "deadline" in drop else manifest.deadline,
        )
    return manifest, notes


def resubmit(
    client: JobsClient,
    job_id: str,
    flags: Mapping[str, Any] | None = None,
    *,
    secret_specs: list[str] | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    note: Callable[[str], None] | None = None,
) -> str:
    """Submit job `job_id`'s manifest and input root again, with `flags` (JobsClient.submit's
    names) layered on top; returns the new job's id. `note` is told what became of the
    job's begin time and deadline (`carried_times`)."""
    from rbs.client.secrets import read_secrets

    manifest, prov = job_manifest(client, job_id)
    manifest, notes = carried_times(manifest, flags or {}, time.time())
    if note is not None:
        for text in notes:
            note(text)
    restage_or_explain(client, job_id, manifest, prov, cwd or Path.cwd())
    names, secrets = read_secrets(secret_specs or [], manifest.secrets, environ)
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    if names:
        given["secret"] = names
    prov[RESUBMIT_KEY] = str(job_id).partition("_")[0]
    return client.submit(None, manifest=manifest, provenance=prov, secrets=secrets, **given)


__all__ = ["carried_times", "job_manifest", "missing_inputs", "restage_or_explain", "resubmit"]
