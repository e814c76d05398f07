"""Helpers for build tests: write a workspace from a dict of files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def write_tree(root: Path, files: dict[str, str]) -> Path:
    (root / "WORKSPACE").touch()
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


@pytest.fixture
def make_ws(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    return lambda files: write_tree(tmp_path, files)
