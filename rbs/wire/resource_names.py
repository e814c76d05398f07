"""ByteStream resource names of REAPI: parse the read and write forms, and format them.

    read:   {instance}/blobs/{function/}{hash}/{size}
            {instance}/compressed-blobs/{compressor}/{function/}{hash}/{size}
    write:  {instance}/uploads/{uuid}/blobs/{function/}{hash}/{size}{/metadata}
            {instance}/uploads/{uuid}/compressed-blobs/{compressor}/{function/}{hash}/{size}{/metadata}

The instance name may itself contain '/', so the parser finds the first keyword
segment (`uploads`, `blobs`, `compressed-blobs`); the spec forbids those words as
instance-name segments. The function segment is present only for functions whose
hashes are ambiguous (`blake3`); without it a 64-hex hash is SHA256.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rbs.model import Digest, DigestFunction
from rbs.wire.errors import InvalidRequest
from rbs.wire.reapi import infer_function

_KEYWORDS = ("uploads", "blobs", "compressed-blobs")
# Functions whose lowercase name appears as a segment; rbs serves only blake3 of them.
_NAMED_FUNCTIONS = {"blake3": DigestFunction.BLAKE3}
_UNSUPPORTED_NAMED = {"sha256tree", "gitsha1"}


class Compressor(enum.Enum):
    """Blob encodings on the wire; the segment names of compressed-blobs resource names."""

    IDENTITY = "identity"
    ZSTD = "zstd"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceName:
    """A parsed ByteStream resource name."""

    instance: str
    digest: Digest
    compressor: Compressor = Compressor.IDENTITY
    upload_id: str | None = None
    metadata: str = ""

    def read_name(self) -> str:
        return format_read_name(self.instance, self.digest, self.compressor)


def _fail(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(
        f"malformed resource name {name!r}: {why}; expected "
        "[INSTANCE/]blobs/[blake3/]HASH/SIZE for reads and "
        "[INSTANCE/]uploads/UUID/blobs/[blake3/]HASH/SIZE for writes "
        "(or compressed-blobs/zstd/... in place of blobs/...)"
    )


def parse_resource_name(name: str, *, write: bool) -> ResourceName:
    """Parse a read (write=False) or write (write=True) resource name."""
    parts = name.split("/")
    try:
        i = next(k for k, seg in enumerate(parts) if seg in _KEYWORDS)
    except StopIteration:
        raise _fail(name, "no 'blobs', 'compressed-blobs' or 'uploads' segment") from None
    instance, rest = "/".join(parts[:i]), parts[i:]
    upload_id = None
    if write:
        if rest[0] != "uploads":
            raise _fail(name, "a write needs uploads/UUID/ before blobs/")
        if len(rest) < 2 or not rest[1]:
            raise _fail(name, "empty upload id after uploads/")
        upload_id, rest = rest[1], rest[2:]
    elif rest[0] == "uploads":
        raise _fail(name, "uploads/... names are for writes; read blobs/HASH/SIZE")
    if not rest:
        raise _fail(name, "nothing after the upload id")
    compressor = Compressor.IDENTITY
    if rest[0] == "compressed-blobs":
        if len(rest) < 2:
            raise _fail(name, "compressed-blobs/ needs a compressor segment")
        try:
            compressor = Compressor(rest[1])
        except ValueError:
            raise InvalidRequest(
                f"unsupported compressor {rest[1]!r} in resource name {name!r}; "
                "this server supports: zstd"
            ) from None
        if compressor is Compressor.IDENTITY:
            raise _fail(name, "use blobs/ for uncompressed data, not compressed-blobs/identity")
        rest = rest[2:]
    elif rest[0] == "blobs":
        rest = rest[1:]
    else:
        raise _fail(name, f"expected blobs/ or compressed-blobs/, got {rest[0]!r}")
    fn: DigestFunction | None = None
    if rest and rest[0] in _NAMED_FUNCTIONS:
        fn, rest = _NAMED_FUNCTIONS[rest[0]], rest[1:]
    elif rest and rest[0] in _UNSUPPORTED_NAMED:
        raise InvalidRequest(
            f"digest function {rest[0]} in resource name {name!r} is not supported; "
            "this server supports sha256 and blake3"
        )
    if len(rest) < 2:
        raise _fail(name, "missing HASH/SIZE")
    hash_, size_text = rest[0], rest[1]
    if not size_text.isdigit():
        raise _fail(name, f"size {size_text!r} is not a non-negative integer")
    function = fn or infer_function(hash_)
    try:
        digest = Digest(function=function, hash=hash_, size=int(size_text))
    except ValueError as e:
        raise _fail(name, str(e)) from None
    return ResourceName(
        instance=instance,
        digest=digest,
        compressor=compressor,
        upload_id=upload_id,
        metadata="/".join(rest[2:]),
    )


def _blob_path(digest: Digest, compressor: Compressor) -> str:
    fn = "blake3/" if digest.function is DigestFunction.BLAKE3 else ""
    kind = "blobs" if compressor is Compressor.IDENTITY else f"compressed-blobs/{compressor.value}"
    return f"{kind}/{fn}{digest.hash}/{digest.size}"


def format_read_name(
    instance: str, digest: Digest, compressor: Compressor = Compressor.IDENTITY
) -> str:
    prefix = f"{instance}/" if instance else ""
    return prefix + _blob_path(digest, compressor)


def format_write_name(
    instance: str,
    upload_id: str,
    digest: Digest,
    compressor: Compressor = Compressor.IDENTITY,
) -> str:
    prefix = f"{instance}/" if instance else ""
    return f"{prefix}uploads/{upload_id}/" + _blob_path(digest, compressor)
