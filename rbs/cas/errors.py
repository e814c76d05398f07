"""Domain errors of the content-addressed store; servers map them to gRPC status codes."""

from __future__ import annotations

from pathlib import Path

from rbs.model import Digest


class CasError(Exception):
    """Base class of every store error; the message says what is wrong and what to do."""


class BlobNotFound(CasError):
    """A blob the store does not hold; `where` says what needed it (e.g. a tree path)."""

    def __init__(self, digest: Digest, *, where: str | None = None) -> None:
        need = f" (needed for {where})" if where else ""
        super().__init__(
            f"blob {digest}{need} is not in the store; upload it (or the tree holding it) again"
        )
        self.digest = digest
        self.where = where


class DigestMismatch(CasError):
    """Bytes that do not hash to the digest they were sent under; nothing was stored.

    `actual` is the digest of the bytes received; with `truncated` the sender sent
    more than `expected.size` and the rest was not read.
    """

    def __init__(self, expected: Digest, actual: Digest, *, truncated: bool = False) -> None:
        if expected.size != actual.size:
            got = f"more than {expected.size}" if truncated else str(actual.size)
            msg = (
                f"size does not match the digest: {expected} names {expected.size} bytes, "
                f"got {got}; send the bytes the digest was computed from"
            )
        else:
            msg = (
                f"content does not match the digest: expected {expected}, the bytes hash to "
                f"{actual}; recompute the digest or resend the data"
            )
        super().__init__(msg)
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


class InvalidDigest(CasError, ValueError):
    """A digest message naming no valid blob (malformed hash, negative size) or a digest
    function rbs does not serve. A ValueError too, like the Digest it could not become."""


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
