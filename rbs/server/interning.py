"""One copy of values that many jobs hold alike (provenance, for instance), kept by the server.

Jobs submitted from one shell loop carry equal provenance tuples (about 20 pairs, some
1.1 KB each); the scheduler keeps each job's for `rbs job show`. Handing it the first
equal tuple instead of a fresh one stores it once for the whole loop. The table holds
at most `size` distinct values and starts again when full (nothing breaks then: a value
is merely stored twice).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TypeVar

H = TypeVar("H", bound=Hashable)


class Interner:
    """Equal values in, the first such value out."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._seen: dict[object, object] = {}

    def __call__(self, value: H) -> H:
        found = self._seen.get(value)
        if found is not None:
            return found  # type: ignore[return-value]
        if len(self._seen) >= self._size:
            self._seen.clear()
        self._seen[value] = value
        return value
