"""A --pty job's raw output fanned out to attached clients, each held within its bound."""

from __future__ import annotations

import asyncio

from rbs.server.job_attach import _winsize
from rbs.server.job_pty import PtyStreams, Subscriber
from rbs.wire.workers_jobs import OutputReport


def test_every_subscriber_of_the_job_gets_each_chunk_in_order() -> None:
    async def go() -> None:
        streams = PtyStreams()
        a, b = streams.subscribe(12), streams.subscribe(12)
        other = streams.subscribe(13)
        streams.publish(OutputReport(lease_id="12.1.0", data=b"$ "))
        streams.publish(OutputReport(lease_id="12.1.0", data=b"ls\r\n"))
        streams.publish(OutputReport(lease_id="not-a-lease", data=b"x"))  # ignored
        await a.wait(5.0)
        await asyncio.sleep(0)  # the second chunk's callback, queued after the first
        assert a.take() == b"$ ls\r\n" and b.take() == b"$ ls\r\n"
        assert other.take() == b""
        streams.unsubscribe(12, a)
        streams.publish(OutputReport(lease_id="12_3.1.0", data=b"more"))  # an array task
        await b.wait(5.0)
        assert (a.take(), b.take()) == (b"", b"more")
        assert streams.count(12) == 1

    asyncio.run(go())


def test_a_slow_client_loses_what_is_past_its_bound_and_is_told_how_much() -> None:
    async def go() -> None:
        sub = Subscriber(asyncio.get_running_loop(), limit=10)
        sub.put(b"12345678")
        sub.put(b"abcdef")  # over the bound: dropped
        sub.put(b"xy")
        assert sub.dropped == 6
        assert sub.take() == b"12345678xy"
        await sub.wait(0.01)  # nothing queued: returns after its timeout

    asyncio.run(go())


def test_winsize_controls_take_only_sizes_a_terminal_has() -> None:
    assert _winsize([40, 120]) == (40, 120)
    for bad in (None, [40], [0, 80], [40, -1], [40, 10001], ["40", "80"], [True, 80], 40):
        assert _winsize(bad) is None
