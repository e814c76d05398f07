"""The operation registry: dedupe keys, watchers, persistence across a restart, pruning."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rbs.model import Digest, DigestFunction
from rbs.server.operations import (
    Operation,
    OperationRegistry,
    OperationStore,
    Stage,
    UnknownOperation,
)

A = Digest.of(b"action", DigestFunction.SHA256)


def test_inflight_is_keyed_by_instance_and_digest(tmp_path: Path) -> None:
    reg = OperationRegistry(OperationStore(tmp_path / "ops.db"))
    op = reg.create(A, stage=Stage.QUEUED)
    assert reg.inflight("", A) == op
    assert reg.inflight("other", A) is None
    assert reg.inflight("", Digest.of(b"action", DigestFunction.BLAKE3)) is None
    reg.complete(op.name, b"resp")
    assert reg.inflight("", A) is None
    # A finished operation is final: a late update changes nothing.
    assert reg.update(op.name, stage=Stage.EXECUTING).done


def test_watchers_see_every_stage_and_the_end() -> None:
    reg = OperationRegistry(OperationStore(None))

    async def go() -> list[Stage]:
        op = reg.create(A, stage=Stage.QUEUED)
        seen: list[Stage] = []

        async def watch() -> None:
            async for o in reg.watch(op.name):
                seen.append(o.stage)

        task = asyncio.create_task(watch())
        await asyncio.sleep(0)
        reg.update(op.name, stage=Stage.EXECUTING)
        await asyncio.sleep(0)
        reg.complete(op.name, b"done")
        await asyncio.wait_for(task, 5)
        return seen

    assert asyncio.run(go()) == [Stage.QUEUED, Stage.EXECUTING, Stage.COMPLETED]


def test_keepalive_repeats_the_state() -> None:
    reg = OperationRegistry(OperationStore(None))

    async def go() -> int:
        op = reg.create(A, stage=Stage.QUEUED)
        n = 0
        async for _ in reg.watch(op.name, keepalive=0.01):
            n += 1
            if n == 3:
                reg.complete(op.name, b"x")
        return n

    assert asyncio.run(asyncio.wait_for(go(), 5)) == 4


def test_state_survives_a_restart_and_old_results_are_dropped(tmp_path: Path) -> None:
    store = OperationStore(tmp_path / "ops.db")
    reg = OperationRegistry(store)
    running = reg.create(A, instance="ci", stage=Stage.QUEUED)
    reg.update(running.name, stage=Stage.EXECUTING, worker_id="w1", lease_id="l1", attempt=2)
    done = reg.create(Digest.of(b"b"), stage=Stage.QUEUED)
    reg.complete(done.name, b"resp")
    instant = reg.create(Digest.of(b"c"), stage=Stage.COMPLETED, response=b"r", persist=False)
    store.close()

    store2 = OperationStore(tmp_path / "ops.db")
    reg2 = OperationRegistry(store2)
    pending = reg2.restore(store2.load(keep_done_since=0))
    assert [p.name for p in pending] == [running.name]
    back: Operation = pending[0]
    assert (back.instance, back.worker_id, back.lease_id, back.attempt) == ("ci", "w1", "l1", 2)
    assert reg2.inflight("ci", A) is not None
    assert reg2.get(done.name).response == b"resp"
    with pytest.raises(UnknownOperation):
        reg2.get(instant.name)
    # Finished operations older than the horizon are pruned from memory and disk.
    assert reg2.prune(older_than=time.time() + 1) == 1
    with pytest.raises(UnknownOperation, match="call Execute again"):
        reg2.get(done.name)
    assert [o.name for o in store2.load(keep_done_since=0)] == [running.name]
