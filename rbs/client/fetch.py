"""Download a tree from the cluster's CAS over the jobs HTTP API into a local folder."""

from __future__ import annotations

import os
from pathlib import Path

from rbs.cas.digests import digest_from_pb
from rbs.cas.memory import MemoryStore
from rbs.cas.tree import materialize, read_directory
from rbs.client.http import HttpConnection
from rbs.model import Digest
from rbs.wire.jobs_api_requests import blob_path


def _get(conn: HttpConnection, d: Digest) -> bytes:
    return conn.request("GET", blob_path(d)).body


def fetch_tree(conn: HttpConnection, root: Digest, dest: Path) -> None:
    """Fetch every Directory and file blob of `root` and recreate the tree at `dest`."""
    store = MemoryStore()
    stack = [root]
    while stack:
        d = stack.pop()
        store.put(_get(conn, d), expected=d)
        msg = read_directory(store, d)
        stack.extend(digest_from_pb(c.digest, root.function) for c in msg.directories)
        for f in msg.files:
            fd = digest_from_pb(f.digest, root.function)
            if fd.size and not store.contains(fd):
                store.put(_get(conn, fd), expected=fd)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty; choose another --dest or remove it")
    os.rmdir(dest)
    materialize(store, root, dest, link=False)
