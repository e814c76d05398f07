"""Frozen dataclasses shared by every part of rbs: digests and (later) job manifests."""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from typing import Protocol

import blake3


class Hasher(Protocol):
    """The part of hashlib's and blake3's hasher interface that rbs uses."""

    def update(self, data: bytes, /) -> object: ...
    def hexdigest(self) -> str: ...


class DigestFunction(enum.Enum):
    """A hash function for content addresses; always explicit, never guessed from a hash."""

    BLAKE3 = "blake3"
    SHA256 = "sha256"

    def hasher(self) -> Hasher:
        if self is DigestFunction.BLAKE3:
            h: Hasher = blake3.blake3()
            return h
        return hashlib.sha256()

    @classmethod
    def parse(cls, text: str) -> DigestFunction:
        try:
            return cls(text.lower())
        except ValueError:
            names = ", ".join(f.value for f in cls)
            raise ValueError(f"unknown digest function {text!r}; use one of: {names}") from None


DEFAULT_FUNCTION = DigestFunction.BLAKE3
_HEX64 = re.compile(r"[0-9a-f]{64}")
_TEXT = re.compile(r"(?:(?P<fn>[a-z0-9]+)[:/])?(?P<hash>[0-9a-fA-F]{64})/(?P<size>\d+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Digest:
    """A content address: hash function, lowercase hex hash, and size in bytes."""

    function: DigestFunction
    hash: str
    size: int

    def __post_init__(self) -> None:
        if not _HEX64.fullmatch(self.hash):
            raise ValueError(
                f"malformed {self.function.value} hash {self.hash!r}: want 64 lowercase hex characters"
            )
        if self.size < 0:
            raise ValueError(f"negative blob size {self.size} for {self.hash}")

    @classmethod
    def of(cls, data: bytes, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        h = function.hasher()
        h.update(data)
        return cls(function=function, hash=h.hexdigest(), size=len(data))

    @classmethod
    def empty(cls, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        return cls.of(b"", function)

    @classmethod
    def parse(cls, text: str, default: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        """Parse `blake3:HASH/SIZE`, `sha256:HASH/SIZE` or `HASH/SIZE` (default function)."""
        m = _TEXT.fullmatch(text.strip())
        if not m:
            raise ValueError(
                f"malformed digest {text!r}: write it as FUNCTION:HASH/SIZE, "
                "e.g. blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262/0"
            )
        fn = DigestFunction.parse(m["fn"]) if m["fn"] else default
        return cls(function=fn, hash=m["hash"].lower(), size=int(m["size"]))

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def __str__(self) -> str:
        return f"{self.function.value}:{self.hash}/{self.size}"
