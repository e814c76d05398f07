"""Wake-ups per job: a coroutine waits until the job's next `wake`, or a timeout.

The log store wakes a job's followers on each batch of new lines; the job driver wakes
those waiting for the job's state (`GET /v1/jobs/{id}/wait`) only when it changes, so
a waiter for an array's end is not woken, to find it still running, by every task's
lines. Waiting costs no task of its own (`asyncio.timeout`, not `wait_for`).
"""

from __future__ import annotations

import asyncio
import contextlib


class JobWaits:
    """One event per job with waiters; `wake` sets it and forgets it."""

    def __init__(self) -> None:
        self._events: dict[int, asyncio.Event] = {}

    def wake(self, job_id: int) -> None:
        ev = self._events.pop(job_id, None)
        if ev is not None:
            ev.set()

    async def wait(self, job_id: int, timeout: float) -> None:
        """Return at the job's next `wake`, or after `timeout` seconds."""
        ev = self._events.get(job_id)
        if ev is None:
            ev = self._events[job_id] = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await ev.wait()
