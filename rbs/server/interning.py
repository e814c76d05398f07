"""One copy of values that many jobs hold alike (provenance, commands), kept by the server.

Jobs submitted from one shell loop carry equal provenance tuples (about 20 pairs, some
1.1 KB each), commands, resources and outputs; the scheduler keeps each job's.
Handing it the first equal value instead of a fresh one stores it once for the whole
loop. The table holds at most `size` distinct values and starts again when full (nothing
breaks then: a value is merely stored twice).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import TypeVar

from rbs.model import JobManifest

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

    def submission(
        self, manifest: JobManifest, provenance: Mapping[str, str]
    ) -> tuple[JobManifest, tuple[tuple[str, str], ...]]:
        """A submitted manifest with its parts shared, and its provenance as a shared
        sorted tuple."""
        parts = {
            "command": self(manifest.command),
            "resources": self(manifest.resources),
            "outputs": self(manifest.outputs),  # env: the manifest sorts it into a new tuple
        }
        if any(getattr(manifest, k) is not v for k, v in parts.items()):
            manifest = dataclasses.replace(manifest, **parts)  # type: ignore[arg-type]
        return manifest, self(tuple(sorted(provenance.items())))
