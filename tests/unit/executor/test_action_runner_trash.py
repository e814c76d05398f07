"""A finished sandbox leaves the action's path at once and is deleted beside it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reapi_actions import make_action

from rbs.cas.memory import MemoryStore
from rbs.executor.action_runner import ActionExecutor


def test_sandbox_is_set_aside_before_the_result_and_deleted_after(tmp_path: Path) -> None:
    store = MemoryStore()
    digest = make_action(
        store, ["/bin/sh", "-c", "mkdir -p a/b && echo x > a/b/c && echo ok > o"], outputs=["o"]
    )
    runner = ActionExecutor(store, tmp_path / "work", worker_name="w1")

    async def main() -> tuple[list[Path], int]:
        outcome = await runner.run(digest, name="lease-1")
        assert outcome.result is not None and outcome.result.exit_code == 0
        # The slot is free while the sandbox's files may still be going.
        left = list((tmp_path / "work" / "sandboxes").iterdir())
        pending = len(runner._deleting)
        await asyncio.gather(*runner._deleting)
        return left, pending

    left, pending = asyncio.run(main())
    assert left == []
    assert pending <= 1
    assert list((tmp_path / "work" / "sandboxes.trash").iterdir()) == []


def test_clean_leftovers_empties_the_trash(tmp_path: Path) -> None:
    trash = tmp_path / "work" / "sandboxes.trash" / "lease-7"
    (trash / "root").mkdir(parents=True)
    (trash / "root" / "f").write_text("left by a killed worker")
    ActionExecutor(MemoryStore(), tmp_path / "work").clean_leftovers()
    assert not trash.parent.exists()
