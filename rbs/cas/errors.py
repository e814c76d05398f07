"""Domain errors of the content-addressed store; servers map them to gRPC status codes."""

from __future__ import annotations

from pathlib import Path

from rbs.model import Digest


class CasError(Exception):
    """Base class of every store error; the message says what is wrong and what to do."""


class BlobNotFound(CasError):
    def __init__(self, digest: Digest) -> None:
        super().__init__(f"blob {digest} is not in the store")
        self.digest = digest


class DigestMismatch(CasError):
    def __init__(self, expected: Digest, actual: Digest) -> None:
        what = "size" if expected.hash == actual.hash else "content"
        super().__init__(
            f"{what} does not match its digest: expected {expected}, the bytes hash to {actual}"
        )
        self.expected = expected
        self.actual = actual


class CorruptBlob(CasError):
    def __init__(self, digest: Digest, path: Path | None = None) -> None:
        where = f" at {path}" if path else ""
        super().__init__(
            f"stored blob {digest}{where} is corrupt (its bytes no longer match the digest); "
            "it has been removed and must be uploaded again"
        )
        self.digest = digest
        self.path = path


class InvalidTree(CasError):
    """A Directory message or path that would be unsafe or ambiguous to store or materialize."""


class StoreFull(CasError):
    def __init__(self, path: Path, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"no space left on the device holding the store at {path}{extra}; "
            "free space or run `rbs cas gc --max-size SIZE`"
        )
        self.path = path
