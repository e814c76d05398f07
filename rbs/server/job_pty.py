"""A --pty job's raw terminal output, fanned out to the websockets attached to it.

The worker sends what a --pty run writes to its terminal as JobOutput messages
(`OutputReport`) on its Workers stream, as the supervisor read it, with no waiting for
a line's end (docs/design/interactive.md). The driver hands each one to
`PtyStreams.publish`, which gives it to every attached client's `Subscriber` of that
job. Nothing is stored here: the log has the same output as lines (for `rbs job logs`),
and a client that attaches later gets the bytes from then on, as `sattach` does.

Each subscriber holds at most `MAX_HELD` bytes for a client that reads slowly; past
it, output is dropped for that client alone (counted, and said once it reads again),
so one stalled terminal never holds the server's memory or the other clients back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import weakref
from typing import TYPE_CHECKING

from rbs.scheduler.events import RunRef

if TYPE_CHECKING:
    from rbs.server.job_driver import JobDriver
    from rbs.wire.workers_jobs import OutputReport

MAX_HELD = 4 << 20  # bytes held for one slow client


class Subscriber:
    """One attached client's queue of output chunks."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int = MAX_HELD) -> None:
        self.loop = loop
        self.limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self.dropped = 0  # bytes dropped since the client last read
        self._ready = asyncio.Event()

    def put(self, data: bytes) -> None:
        """On the subscriber's loop: queue a chunk, or drop it past the limit."""
        if self._size + len(data) > self.limit:
            self.dropped += len(data)
        else:
            self._chunks.append(data)
            self._size += len(data)
        self._ready.set()

    def take(self) -> bytes:
        """Every chunk queued, as one (empty: none)."""
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        self._ready.clear()
        return data

    async def wait(self, timeout: float) -> None:
        """Until a chunk is queued, or `timeout` seconds."""
        if self._chunks or self.dropped:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)


class PtyStreams:
    """The subscribers of each job, by job id."""

    def __init__(self) -> None:
        self._subs: dict[int, set[Subscriber]] = {}

    def subscribe(self, job_id: int) -> Subscriber:
        sub = Subscriber(asyncio.get_running_loop())
        self._subs.setdefault(job_id, set()).add(sub)
        return sub

    def unsubscribe(self, job_id: int, sub: Subscriber) -> None:
        subs = self._subs.get(job_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[job_id]

    def publish(self, report: OutputReport) -> None:
        """From the Workers stream (any thread): a chunk for the job's subscribers."""
        try:
            job_id = RunRef.parse_lease(report.lease_id).job_id
        except ValueError:
            return
        for sub in list(self._subs.get(job_id, ())):
            sub.loop.call_soon_threadsafe(sub.put, report.data)

    def count(self, job_id: int) -> int:
        return len(self._subs.get(job_id, ()))


_STREAMS: weakref.WeakKeyDictionary[JobDriver, PtyStreams] = weakref.WeakKeyDictionary()


def streams_of(driver: JobDriver) -> PtyStreams:
    """The driver's PtyStreams, made (and handed the driver's output) on first use."""
    streams = _STREAMS.get(driver)
    if streams is None:
        streams = _STREAMS[driver] = PtyStreams()
        driver.on_output = streams.publish
    return streams
