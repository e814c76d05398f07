"""Download a tree from the cluster's CAS over the jobs HTTP API into a local folder."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from rbs.cas import transfer
from rbs.cas.digests import digest_from_pb
from rbs.cas.errors import CasError, DigestMismatch
from rbs.cas.memory import MemoryStore
from rbs.cas.tree import materialize, read_directory
from rbs.client.errors import JobError
from rbs.client.http import ConnectError, HttpConnection, HttpError
from rbs.model import Digest
from rbs.wire.jobs_api_requests import blob_path


def _get(conn: HttpConnection, d: Digest) -> bytes:
    try:
        data = conn.request("GET", blob_path(d)).body
        transfer.advance(len(data))
        return data
    except HttpError as e:
        raise JobError(f"cannot download blob {d}: {e.message}") from None
    except ConnectError as e:
        raise JobError(f"cannot download blob {d}: {e}") from None


def _put(store: MemoryStore, data: bytes, d: Digest) -> None:
    try:
        store.put(data, expected=d)
    except DigestMismatch as e:
        raise JobError(
            f"the server sent bytes for blob {d} that do not match it ({e}); nothing was "
            "written, try again (`rbs cas verify` on the server's store finds corrupt blobs)"
        ) from None


def fetch_tree(conn: HttpConnection, root: Digest, dest: Path) -> None:
    """Fetch every Directory and file blob of `root` and recreate the tree at `dest`.

    Every blob is checked against its digest in memory before anything is written,
    and the tree is built in a temp folder next to `dest` that takes its name only
    when whole: a failed download leaves no partial file and no half-made tree.
    Failures are JobError naming the blob."""
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty; choose another --dest or remove it")
    os.rmdir(dest)
    store = MemoryStore()
    stack = [root]
    transfer.expect(root.size)
    while stack:
        d = stack.pop()
        _put(store, _get(conn, d), d)
        try:
            msg = read_directory(store, d)
        except CasError as e:
            raise JobError(f"output tree {root}: {e}") from None
        children = [digest_from_pb(c.digest, root.function) for c in msg.directories]
        files = [digest_from_pb(f.digest, root.function) for f in msg.files]
        # A progress bar learns the tree's size as its folders are read.
        transfer.expect(sum(c.size for c in children) + sum(f.size for f in files))
        stack.extend(children)
        for fd in files:
            if fd.size and not store.contains(fd):
                _put(store, _get(conn, fd), fd)
            else:
                transfer.advance(fd.size)  # a file fetched already (equal content)
    tmp = dest.with_name(f".{dest.name}.rbs-tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with transfer.reporting(None):  # its bytes were counted as they were fetched
            materialize(store, root, tmp, link=False)
        os.rename(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(tmp)
        raise
