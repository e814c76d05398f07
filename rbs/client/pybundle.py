"""The CAS side of rbs.JobExecutor: stage a pickled call as a job's inputs, read results.

A bundle is a tree made in memory: `_rbs/pyrun.py` (rbs.client.pyrun's source), the
caller's cloudpickle package (`_rbs/cloudpickle/`), `_rbs/spec.json` (the caller's
versions), `_rbs/fn.pkl` and `_rbs/calls/N.pkl` (task N's calls), merged with any
`inputs=` the caller stages from disk. One find-missing call decides what crosses the
wire, so the same function and arguments sent again upload nothing.

Each task's result comes back as the job's recorded output `_rbs_out/`:
`result.pkl` (one (ok, value, traceback) per call) or `error.txt` (the runner refused
to start: versions, or an unpicklable function).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rbs.cas.digests import digest_from_pb
from rbs.cas.memory import MemoryStore
from rbs.cas.tree import TreeEntry, build_tree, read_directory
from rbs.client import pyrun
from rbs.client.errors import JobError
from rbs.client.http import ConnectError, HttpConnection, HttpError
from rbs.client.staging import _all_dir_digests, collect_entries, find_missing, upload
from rbs.model import DEFAULT_FUNCTION, Digest
from rbs.wire.jobs_api_requests import blob_path


@dataclass(frozen=True, slots=True)
class Staged:
    root: Digest
    uploaded_blobs: int
    uploaded_bytes: int


def caller_versions() -> dict[str, str]:
    import cloudpickle

    return {"python": "{}.{}".format(*sys.version_info[:2]), "cloudpickle": cloudpickle.__version__}


def _runtime_files() -> dict[str, bytes]:
    """The runner and the caller's cloudpickle package, by their path in the bundle."""
    import cloudpickle

    files = {f"{pyrun.BUNDLE_DIR}/pyrun.py": Path(pyrun.__file__).read_bytes()}
    pkg = Path(cloudpickle.__file__).parent
    for src in sorted(pkg.glob("*.py")):
        files[f"{pyrun.BUNDLE_DIR}/cloudpickle/{src.name}"] = src.read_bytes()
    return files


def stage_bundle(
    conn: HttpConnection,
    fn_blob: bytes,
    call_blobs: Sequence[bytes],
    spec: Mapping[str, str],
    *,
    inputs: Sequence[str] = (),
    cwd: Path | None = None,
) -> Staged:
    function = DEFAULT_FUNCTION
    files = _runtime_files()
    files[f"{pyrun.BUNDLE_DIR}/spec.json"] = json.dumps(dict(spec), sort_keys=True).encode()
    files[f"{pyrun.BUNDLE_DIR}/fn.pkl"] = fn_blob
    for i, blob in enumerate(call_blobs):
        files[f"{pyrun.BUNDLE_DIR}/calls/{i}.pkl"] = blob
    entries: dict[str, TreeEntry | None] = {}
    blobs: dict[Digest, bytes | Path] = {}
    if inputs:
        disk, sources = collect_entries(inputs, cwd or Path.cwd(), function)
        for rel in disk:
            if rel == pyrun.BUNDLE_DIR or rel.startswith(pyrun.BUNDLE_DIR + "/"):
                raise JobError(f"inputs: {rel!r} is reserved for the executor's own files")
        entries.update(disk)
        blobs.update(sources)
    for rel, data in files.items():
        d = Digest.of(data, function)
        entries[rel] = TreeEntry(digest=d)
        blobs.setdefault(d, data)
    dirs = MemoryStore()
    root = build_tree(dirs, entries, function=function)
    for d in _all_dir_digests(dirs, root):
        blobs[d] = dirs.get(d)
    try:
        missing = find_missing(conn, blobs)
        sent = upload(conn, {d: blobs[d] for d in missing})
    except HttpError as e:
        raise JobError(e.message) from None
    except ConnectError as e:
        raise JobError(str(e)) from None
    return Staged(root=root, uploaded_blobs=len(missing), uploaded_bytes=sent)


def _get(conn: HttpConnection, d: Digest) -> bytes:
    if not d.size:
        return b""
    try:
        data = conn.request("GET", blob_path(d)).body
    except HttpError as e:
        raise JobError(f"cannot download result blob {d}: {e.message}") from None
    except ConnectError as e:
        raise JobError(f"cannot download result blob {d}: {e}") from None
    if Digest.of(data, d.function) != d:
        raise JobError(f"the server sent bytes for result blob {d} that do not match it")
    return data


def read_result(conn: HttpConnection, output_root: Digest) -> tuple[str, bytes] | None:
    """("result", pickle bytes) or ("error", text bytes) from a task's output tree;
    None when the task left neither."""
    store = MemoryStore()
    store.put(_get(conn, output_root), expected=output_root)
    top = read_directory(store, output_root)
    sub = next((c for c in top.directories if c.name == pyrun.OUT_DIR), None)
    if sub is None:
        return None
    out_d = digest_from_pb(sub.digest, output_root.function)
    store.put(_get(conn, out_d), expected=out_d)
    files = {
        f.name: digest_from_pb(f.digest, output_root.function)
        for f in read_directory(store, out_d).files
    }
    for name, kind in (("error.txt", "error"), ("result.pkl", "result")):
        if name in files:
            return kind, _get(conn, files[name])
    return None


def decode_outcomes(data: bytes) -> list[tuple[bool, Any, str]]:
    import cloudpickle

    return list(cloudpickle.loads(data))
