"""SupervisorClient.send_later: a frame nobody waits for rides in the next write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rbs.executor import supervisor_client
from rbs.executor.supervisor_client import SupervisorClient, SupervisorError
from rbs.executor.supervisor_proto import (
    Forget,
    FrameReader,
    KillRun,
    Message,
    Renew,
    decode,
)


class Transport(asyncio.Transport):
    """Records each write as the messages in it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[Message]] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append([decode(b) for b in FrameReader().feed(bytes(data))])

    def close(self) -> None:
        self.closed = True


def _client(tmp_path: Path) -> tuple[SupervisorClient, Transport]:
    client = SupervisorClient(
        tmp_path,
        cgroups="none",
        scope="w",
        hostname="h",
        on_event=lambda m: None,
        on_lost=lambda: None,
    )
    transport = Transport()
    client.connection_made(transport)
    return client, transport


def test_a_later_frame_goes_in_order_in_the_next_write(tmp_path: Path) -> None:
    async def main() -> list[list[Message]]:
        client, transport = _client(tmp_path)
        client.send_later(Forget(lease_id="a"))
        client.send_later(Forget(lease_id="b"))
        assert transport.writes == []  # held
        client.send(KillRun(lease_id="c", reason="CANCELLED", message="m"))
        client.send(Renew(until=1.0, grace_s=2.0))
        return transport.writes

    writes = asyncio.run(main())
    assert writes == [
        [
            Forget(lease_id="a"),
            Forget(lease_id="b"),
            KillRun(lease_id="c", reason="CANCELLED", message="m"),
        ],
        [Renew(until=1.0, grace_s=2.0)],
    ]


def test_a_later_frame_alone_is_written_within_later_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_client, "LATER_S", 0.01)

    async def main() -> list[list[Message]]:
        client, transport = _client(tmp_path)
        client.send_later(Forget(lease_id="a"))
        for _ in range(1000):  # bounded: 10 s at most
            if transport.writes:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # and no second write of it once the timer has fired
        return transport.writes

    assert asyncio.run(main()) == [[Forget(lease_id="a")]]


def test_close_writes_what_waits_and_a_lost_connection_drops_it(tmp_path: Path) -> None:
    async def main() -> tuple[list[list[Message]], list[list[Message]]]:
        client, transport = _client(tmp_path)
        client.send_later(Forget(lease_id="a"))
        client.close()
        assert transport.closed
        lost, lost_transport = _client(tmp_path)
        lost.send_later(Forget(lease_id="b"))
        lost.connection_lost(None)
        lost.flush()
        with pytest.raises(SupervisorError, match="not connected"):
            lost.send_later(Forget(lease_id="c"))
        return transport.writes, lost_transport.writes

    closed, lost = asyncio.run(main())
    assert closed == [[Forget(lease_id="a")]]
    assert lost == []
