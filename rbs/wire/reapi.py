"""REAPI request rules over rbs.cas.digests: every malformed value is an InvalidRequest.

Digest functions: a request's `digest_function` field wins when set (SHA256 or BLAKE3;
anything else is refused, naming the supported ones). When it is unset (older
clients) the function is inferred from the hash as the spec says: 64 hex characters
mean SHA256. BLAKE3 hashes are also 64 characters, so BLAKE3 clients must say so in
the field (or, for ByteStream, in the resource name).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.digests import SUPPORTED_FUNCTIONS, digest_from_pb, function_from_pb
from rbs.cas.errors import InvalidDigest
from rbs.model import Digest, DigestFunction
from rbs.wire.errors import InvalidRequest

# Hash lengths of functions rbs does not serve, to say which one a client used.
_OTHER_LENGTHS = {32: "MD5", 40: "SHA1", 96: "SHA384", 128: "SHA512"}


def function_from_proto(value: int) -> DigestFunction | None:
    """The function a request names, or None when the field is unset (infer it)."""
    try:
        return function_from_pb(value)
    except InvalidDigest as e:
        raise InvalidRequest(str(e)) from None


def infer_function(hash_: str) -> DigestFunction:
    """What an unset digest_function means for this hash: SHA256 for 64 hex characters."""
    if len(hash_) == 64:
        return DigestFunction.SHA256
    other = _OTHER_LENGTHS.get(len(hash_))
    if other:
        raise InvalidRequest(
            f"hash {hash_!r} looks like {other}, which this server does not support; "
            f"use {SUPPORTED_FUNCTIONS}"
        )
    raise InvalidRequest(
        f"malformed hash {hash_!r}: want 64 lowercase hex characters (SHA256, or BLAKE3 "
        "with digest_function = BLAKE3)"
    )


def digest_from_proto(d: re_pb2.Digest, fn: DigestFunction | None, field: str = "digest") -> Digest:
    """Validate a wire digest; `fn` None infers the function from the hash."""
    try:
        return digest_from_pb(d, fn or infer_function(d.hash))
    except InvalidDigest as e:
        raise InvalidRequest(f"{field}: {e}") from None


def digests_from_proto(
    ds: Iterable[re_pb2.Digest], fn: DigestFunction | None, field: str
) -> list[Digest]:
    """`digest_from_proto` for a repeated field; the hot loop of FindMissingBlobs."""
    out: list[Digest] = []
    append = out.append
    for i, d in enumerate(ds):
        try:
            append(digest_from_pb(d, fn or infer_function(d.hash)))
        except (InvalidDigest, InvalidRequest) as e:
            raise InvalidRequest(f"{field}[{i}]: {e}") from None
    return out


def request_function(value: int, first: re_pb2.Digest | None = None) -> DigestFunction:
    """The function for a whole request: its field, else inferred from its first digest."""
    fn = function_from_proto(value)
    if fn is not None:
        return fn
    return infer_function(first.hash) if first is not None else DigestFunction.SHA256


def action_result_digests(result: re_pb2.ActionResult, fn: DigestFunction) -> Iterator[Digest]:
    """Every blob an ActionResult names directly (files, trees, stdout/stderr)."""
    for f in result.output_files:
        yield digest_from_proto(f.digest, fn, f"output file {f.path!r}")
    for d in result.output_directories:
        if d.HasField("tree_digest"):
            yield digest_from_proto(d.tree_digest, fn, f"output directory {d.path!r}")
        if d.HasField("root_directory_digest"):
            yield digest_from_proto(d.root_directory_digest, fn, f"output directory {d.path!r}")
    if result.HasField("stdout_digest"):
        yield digest_from_proto(result.stdout_digest, fn, "stdout_digest")
    if result.HasField("stderr_digest"):
        yield digest_from_proto(result.stderr_digest, fn, "stderr_digest")


def tree_file_digests(tree: re_pb2.Tree, fn: DigestFunction) -> Iterator[Digest]:
    """The file blobs inside an output directory's Tree message."""
    for directory in (tree.root, *tree.children):
        for f in directory.files:
            yield digest_from_proto(f.digest, fn, f"tree file {f.name!r}")
