"""Stage job inputs through the CAS: hash locally, upload only what the cluster lacks.

`--inputs PATH` puts PATH in the job's working directory under its own name (a folder
keeps its name; `.` stages the folder's contents at the top); `--inputs DEST=SRC`
places SRC at DEST. Folders skip `.git` and `.rbs` and honour .gitignore in a git work
tree (rbs.cas.inputs). The tree is built in memory, then one find-missing call decides
which files cross the wire, so resubmitting a tree that changed by one file uploads
one file (plus the few Directory messages above it).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rbs.cas import transfer
from rbs.cas.digests import digest_from_pb
from rbs.cas.inputs import select_inputs
from rbs.cas.memory import MemoryStore
from rbs.cas.store import hash_file
from rbs.cas.tree import TreeEntry, build_tree, read_directory
from rbs.client.http import HttpConnection
from rbs.model import DEFAULT_FUNCTION, Digest, DigestFunction
from rbs.wire import jobs_api_requests as req

BATCH_BYTES = 4 << 20
SMALL_BLOB = 1 << 20


class StagingError(ValueError):
    """A bad --inputs value: names the flag value and the fix."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StageResult:
    root: Digest
    files: int
    bytes_total: int
    uploaded_blobs: int
    uploaded_bytes: int


def _dest_of(spec: str, cwd: Path) -> tuple[str, Path]:
    dest, sep, src = spec.partition("=")
    if not sep:
        src, dest = spec, ""
    elif not src.strip():
        # An empty SRC would be the current folder, with whatever lives in it.
        raise StagingError(
            f"--inputs {spec!r}: SRC is empty; name what to stage, e.g. {dest or 'data'}=./{dest or 'data'}"
            " (or . for the whole current folder)"
        )
    src_path = (cwd / src).resolve() if not os.path.isabs(src) else Path(src)
    if not src_path.exists():
        raise StagingError(f"--inputs {spec!r}: {src_path} does not exist")
    if sep:
        if not dest or dest.startswith("/"):
            raise StagingError(
                f"--inputs {spec!r}: DEST must be a relative path in the working directory"
            )
        norm = PurePosixPath(os.path.normpath(dest)).as_posix()
        if norm == ".." or norm.startswith("../"):
            raise StagingError(
                f"--inputs {spec!r}: DEST {dest!r} escapes the job's working directory; "
                "use a path inside it, e.g. data=./local/data"
            )
        dest = "" if norm == "." else norm
    elif src_path.is_file() or src_path.is_symlink() or src_path != cwd.resolve():
        dest = src_path.name if not (src_path.is_dir() and src == ".") else ""
    return dest, src_path


def collect_entries(
    specs: Sequence[str], cwd: Path, function: DigestFunction
) -> tuple[dict[str, TreeEntry | None], dict[Digest, Path]]:
    """Relative path -> leaf for every staged file, and digest -> a local file holding it."""
    from rbs.client.built import is_target_input, target_entries

    entries: dict[str, TreeEntry | None] = {}
    sources: dict[Digest, Path] = {}
    for spec in specs:
        if is_target_input(spec):
            # DEST=//pkg:target: build it and stage its outputs and runfiles.
            built, built_sources = target_entries(spec, cwd, function)
            for rel in built:
                if rel in entries:
                    raise StagingError(
                        f"--inputs {spec!r}: {rel!r} is staged twice; give each input its own DEST"
                    )
            entries.update(built)
            sources.update(built_sources)
            continue
        dest, src = _dest_of(spec, cwd)
        if src.is_dir() and not src.is_symlink():
            rels = select_inputs(src)
            pairs = [(f"{dest}/{r}" if dest else r, src / r) for r in rels]
        else:
            if not dest:
                raise StagingError(
                    f"--inputs {spec!r}: a file needs a name in the working directory"
                )
            pairs = [(dest, src)]
        for rel, path in pairs:
            if rel in entries:
                if _same_file(entries[rel], path, function):
                    continue  # the same content (a --script inside a staged folder): once
                raise StagingError(
                    f"--inputs {spec!r}: {rel!r} is staged twice; give each input its own DEST"
                )
            if path.is_symlink():
                entries[rel] = TreeEntry(symlink=os.readlink(path))
            elif path.is_dir():
                entries[rel] = None
            else:
                d = hash_file(path, function)
                sources.setdefault(d, path)
                entries[rel] = TreeEntry(digest=d, executable=os.access(path, os.X_OK))
    return entries, sources


def _same_file(entry: TreeEntry | None, path: Path, function: DigestFunction) -> bool:
    """Whether a staged file `entry` holds what the regular file at `path` holds."""
    if entry is None or entry.digest is None or path.is_symlink() or not path.is_file():
        return False
    return hash_file(path, function) == entry.digest


def stage_inputs(
    conn: HttpConnection,
    specs: Sequence[str],
    cwd: Path,
    *,
    function: DigestFunction = DEFAULT_FUNCTION,
    max_bytes: int | None = None,
) -> StageResult:
    entries, sources = collect_entries(specs, cwd, function)
    total = sum(d.size for d in sources)
    if max_bytes is not None and total > max_bytes:
        raise StagingError(
            f"--inputs: the bundle holds {total} bytes, over the limit of {max_bytes}; "
            "stage less (a .gitignore helps) or raise the server's max_bundle_bytes"
        )
    dirs = MemoryStore()
    root = build_tree(dirs, entries, function=function)
    blobs: dict[Digest, bytes | Path] = dict(sources)
    for d in _all_dir_digests(dirs, root):
        blobs[d] = dirs.get(d)
    missing = find_missing(conn, blobs)
    up_bytes = upload(conn, {d: blobs[d] for d in missing})
    return StageResult(
        root=root,
        files=len(entries),
        bytes_total=total,
        uploaded_blobs=len(missing),
        uploaded_bytes=up_bytes,
    )


def _all_dir_digests(store: MemoryStore, root: Digest) -> list[Digest]:
    out, stack = [], [root]
    while stack:
        d = stack.pop()
        out.append(d)
        stack.extend(
            digest_from_pb(c.digest, root.function) for c in read_directory(store, d).directories
        )
    return out


# Digests per `POST /v1/cas/missing`: ~85 bytes of JSON each, so a request stays far
# below the server's JSON body limit (`[http] max_json_body`, 1 MiB) for any tree.
MISSING_BATCH = 5000


def find_missing(conn: HttpConnection, digests: Iterable[Digest]) -> list[Digest]:
    wanted = [d for d in digests if d.size]
    by_text = {str(d): d for d in wanted}
    items = list(by_text.values())
    out: list[Digest] = []
    for i in range(0, len(items), MISSING_BATCH):
        body = req.missing_body(items[i : i + MISSING_BATCH])
        resp = conn.request("POST", req.MISSING_PATH, json_body=body)
        out.extend(by_text[t] for t in resp.json()["missing"])
    return out


def upload(conn: HttpConnection, blobs: dict[Digest, bytes | Path]) -> int:
    """Small blobs in batches, large ones one by one streamed; returns bytes sent."""
    sent = 0
    batch: list[tuple[Digest, bytes]] = []
    batch_size = 0

    def flush() -> None:
        nonlocal batch, batch_size
        if batch:
            conn.request("POST", req.BATCH_PATH, data=req.batch_body(batch))
            transfer.advance(batch_size)
            batch, batch_size = [], 0

    transfer.expect(sum(d.size for d in blobs))

    for d, src in blobs.items():
        if d.size > SMALL_BLOB and isinstance(src, Path):
            conn.upload_file(req.blob_path(d), str(src), d.size)
        else:
            data = src if isinstance(src, bytes) else src.read_bytes()
            if len(data) != d.size:
                raise StagingError(
                    f"{d} from {src!r} changed while it was being staged; submit again"
                )
            batch.append((d, data))
            batch_size += len(data)
            if batch_size >= BATCH_BYTES:
                flush()
        sent += d.size
    flush()
    return sent
