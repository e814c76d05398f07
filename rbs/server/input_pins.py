"""Job inputs kept from eviction: the input trees of jobs in history, for `[cas] keep_inputs`.

`rbs job resubmit ID` runs a job's input root again, so the server's CAS keeps the
trees of jobs submitted within `keep_inputs` (default 7 days) even when it is full
and their blobs are past the lease. A task on the server's loop notes each new job's
input root (`scan`: only jobs it has not seen, in id order), and eviction asks
`pinned()` (on any thread) for the blobs of the trees still kept. A tree's blobs are
read once from the store and remembered: a tree never changes. A job submitted and
evicted within one scan interval is covered by the lease (`[cas] lease`, 3 h).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rbs.cas.digests import digest_from_pb
from rbs.cas.errors import CasError
from rbs.cas.tree import read_directory
from rbs.model import Digest

if TYPE_CHECKING:
    from rbs.cas.store import BlobStore
    from rbs.server.job_driver import JobDriver

log = logging.getLogger(__name__)
SCAN_INTERVAL = 30.0


class InputPins:
    """The input roots kept (root -> until when), and the blobs of their trees."""

    def __init__(
        self, store: BlobStore, keep: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.keep = keep
        self.clock = clock
        self._lock = threading.Lock()
        self._until: dict[Digest, float] = {}
        self._blobs: dict[Digest, frozenset[str]] = {}
        self._seen = 0

    def note(self, root: Digest, since: float) -> None:
        """Keep the tree `root` for `keep` seconds after `since`."""
        with self._lock:
            self._until[root] = max(self._until.get(root, 0.0), since + self.keep)

    def scan(self, driver: JobDriver) -> int:
        """Note the input roots of the jobs not seen yet; returns how many were noted."""
        noted = 0
        for job_id, _state in driver.states():
            if job_id <= self._seen:
                continue
            self._seen = job_id
            view = driver.view(job_id)
            root = view.manifest.input_root
            if root is not None:
                self.note(root, view.submit_time)
                noted += 1
        return noted

    async def follow(self, driver: JobDriver, interval: float = SCAN_INTERVAL) -> None:
        """Scan for new jobs every `interval` seconds, until cancelled."""
        while True:
            try:
                self.scan(driver)
            except Exception:  # a bad record must not end the pins; eviction goes on
                log.exception("noting the input roots of new jobs failed")
            await asyncio.sleep(interval)

    def pinned(self) -> frozenset[str]:
        """The hashes of every blob of the trees still kept (what eviction skips)."""
        now = self.clock()
        with self._lock:
            for root in [r for r, until in self._until.items() if until < now]:
                del self._until[root]
                self._blobs.pop(root, None)
            todo = [r for r in self._until if r not in self._blobs]
        for root in todo:
            blobs = self._tree(root)
            with self._lock:
                if root in self._until:
                    self._blobs[root] = blobs
        with self._lock:
            return frozenset().union(*self._blobs.values())

    def _tree(self, root: Digest) -> frozenset[str]:
        out: set[str] = set()
        stack = [root]
        while stack:  # bounded by the tree: each folder once
            d = stack.pop()
            out.add(d.hash)
            try:
                msg = read_directory(self.store, d)
            except (CasError, OSError):
                continue  # gone already: nothing under it to keep
            out.update(f.digest.hash for f in msg.files)
            stack.extend(digest_from_pb(c.digest, root.function) for c in msg.directories)
        return frozenset(out)


__all__ = ["SCAN_INTERVAL", "InputPins"]
