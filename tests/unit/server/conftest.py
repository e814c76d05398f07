"""Fixtures for the execution unit tests."""

from __future__ import annotations

import pytest

from rbs.cas.memory import MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()
