"""Fixtures for the store tests: every backend and wrapper behind one `store` fixture."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rbs.cas.disk import DiskStore
from rbs.cas.memory import MemoryStore
from rbs.cas.store import BlobStore
from rbs.cas.twolevel import TwoLevelStore
from rbs.cas.verify import VerifyingStore

BACKENDS: dict[str, Callable[[Path], BlobStore]] = {
    "memory": lambda tmp: MemoryStore(),
    "disk": lambda tmp: DiskStore(tmp / "store"),
    "indexed-disk": lambda tmp: _indexed(tmp / "store"),
    "verifying-memory": lambda tmp: VerifyingStore(MemoryStore()),
    "verifying-disk": lambda tmp: VerifyingStore(DiskStore(tmp / "store")),
    "twolevel-memory": lambda tmp: TwoLevelStore(MemoryStore(), MemoryStore()),
    "twolevel-disk": lambda tmp: TwoLevelStore(DiskStore(tmp / "local"), MemoryStore()),
}


def _indexed(root: Path) -> DiskStore:
    """A disk store whose FindMissing index has read the store (so it answers)."""
    store = DiskStore(root, index=True)
    assert store.index is not None and store.index.ready.wait(60), "index never ready"
    return store


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BlobStore]:
    s = BACKENDS[request.param](tmp_path)
    yield s
    if isinstance(s, DiskStore):
        s.close()


@pytest.fixture
def disk(tmp_path: Path) -> DiskStore:
    return DiskStore(tmp_path / "store")
