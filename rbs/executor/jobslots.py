"""A worker's job slots: one per run, handed out in arrival order when all are busy."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

log = logging.getLogger(__name__)


class JobSlots:
    """The free job slots of one worker and the runs waiting for one."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = slots
        self._waiting: collections.deque[asyncio.Future[bool]] = collections.deque()

    @property
    def used(self) -> int:
        return self.slots - self._free

    def hold(self) -> None:
        """A re-attached run's slot: held until it ends, even past a smaller --job-slots."""
        self._free -= 1

    async def acquire(self, run: Any) -> bool:
        """Wait for a free slot; False when the run (a jobrun.LeaseRun, whose `slot_wait`
        a kill resolves) was killed while waiting."""
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return True
        log.warning(
            "lease %s arrived with all %d job slots busy; it waits for one",
            run.lease_id,
            self.slots,
        )
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        run.slot_wait = fut
        self._waiting.append(fut)
        return await fut

    def release(self) -> None:
        """A run's slot is free: the first run still waiting takes it."""
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():
                fut.set_result(True)
                return
        self._free += 1
