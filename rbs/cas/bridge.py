"""Twin digests of one content under two digest functions, for a server that hashes otherwise.

A build keeps its own state in BLAKE3 (the stat cache, the memo, the local store), so
that switching servers never invalidates it. A server that offers only SHA256 gets
SHA256 actions: the bridge gives every BLAKE3 input a SHA256 twin (hashed from the
local copy, stored beside it) and every SHA256 output a BLAKE3 twin (hashed once the
output is fetched, which publishing it needs anyway). Twins are remembered for the
life of the bridge, so each content is hashed again at most once per build.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from rbs.cas.store import CHUNK
from rbs.cas.twolevel import TwoLevelStore
from rbs.model import Digest, DigestFunction


class DigestBridge:
    """Maps digests between `local` (the build's function) and `remote` (the server's)."""

    def __init__(
        self, store: TwoLevelStore, *, local: DigestFunction, remote: DigestFunction
    ) -> None:
        self.store = store
        self.local = local
        self.remote = remote
        self._twins: dict[Digest, Digest] = {}
        self._lock = threading.Lock()

    @property
    def identity(self) -> bool:
        return self.local is self.remote

    def _twin(self, d: Digest, function: DigestFunction) -> Digest:
        if d.function is function:
            return d
        with self._lock:
            have = self._twins.get(d)
        if have is not None:
            return have
        if d.size == 0:
            twin = Digest.of(b"", function)
        else:
            hasher = function.hasher()
            with self.store.open(d) as src:
                while chunk := src.read(CHUNK):
                    hasher.update(chunk)
            twin = Digest(function=function, hash=hasher.hexdigest(), size=d.size)
            # The twin goes into the first level only; `to_remote` uploads in one go.
            if not self.store.local.contains(twin):
                with self.store.open(d) as src, self.store.local.writer(twin) as w:
                    while chunk := src.read(CHUNK):
                        w.write(chunk)
                    w.commit()
        with self._lock:
            self._twins[d] = twin
            self._twins[twin] = d
        return twin

    def to_remote(self, digests: Iterable[Digest]) -> dict[Digest, Digest]:
        """Each digest's twin in the server's function, the new twins uploaded in one go."""
        out = {d: self._twin(d, self.remote) for d in dict.fromkeys(digests)}
        if not self.identity:
            self.store.push([t for t in out.values() if t.size])
        return out

    def to_local(self, d: Digest) -> Digest:
        """The twin in the build's function of a digest the server named."""
        return self._twin(d, self.local)
