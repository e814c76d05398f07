"""Digest <-> REAPI `Digest` message, and the table of digest functions <-> REAPI enum values.

The one home of both. It lives in rbs.cas, not rbs.wire, because Merkle trees are REAPI
`Directory` messages that rbs.cas builds and reads itself, and the layers run
`_proto` < `model` < `cas` < `wire`: cas may not import wire, while wire and every
layer above may import this. rbs.model cannot hold it, since the model never imports
protobuf. Request-level rules (inferring an unset function from the hash, naming the
offending field, answering INVALID_ARGUMENT) are rbs.wire.reapi's, built on these.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.cas.errors import InvalidDigest
from rbs.model import Digest, DigestFunction

_DF = re_pb2.DigestFunction
# The functions rbs serves, in the order Capabilities advertises them.
_TO_PB: dict[DigestFunction, int] = {
    DigestFunction.SHA256: _DF.SHA256,
    DigestFunction.BLAKE3: _DF.BLAKE3,
}
_FROM_PB: dict[int, DigestFunction] = {v: k for k, v in _TO_PB.items()}
SUPPORTED_PB_FUNCTIONS: tuple[int, ...] = tuple(_TO_PB.values())
SUPPORTED_FUNCTIONS = ", ".join(_DF.Value.Name(v) for v in SUPPORTED_PB_FUNCTIONS)


def digest_to_pb(d: Digest) -> re_pb2.Digest:
    return re_pb2.Digest(hash=d.hash, size_bytes=d.size)


def add_digests(field: Any, digests: Iterable[Digest]) -> None:
    """Append to a repeated Digest field: several times faster than a digest_to_pb each."""
    add = field.add
    for d in digests:
        add(hash=d.hash, size_bytes=d.size)


def digest_from_pb(pb: re_pb2.Digest, function: DigestFunction) -> Digest:
    """The Digest a message names under `function`; InvalidDigest when it is malformed."""
    if pb.size_bytes < 0:
        raise InvalidDigest(f"negative size_bytes {pb.size_bytes} for {pb.hash!r}")
    try:
        return Digest(function=function, hash=pb.hash, size=pb.size_bytes)
    except ValueError as e:
        raise InvalidDigest(str(e)) from None


def function_to_pb(fn: DigestFunction) -> int:
    """The REAPI `DigestFunction.Value` of a function."""
    return _TO_PB[fn]


def function_name(value: int) -> str:
    """The REAPI name of an enum value (e.g. "MD5"), or the number when it has none."""
    try:
        return str(_DF.Value.Name(value))
    except ValueError:
        return str(value)


def function_from_pb(value: int) -> DigestFunction | None:
    """The function an enum value names; None when unset (UNKNOWN), so the caller
    decides what unset means; InvalidDigest for a function rbs does not serve."""
    if value == _DF.UNKNOWN:
        return None
    fn = _FROM_PB.get(value)
    if fn is None:
        raise InvalidDigest(
            f"digest function {function_name(value)} is not supported; "
            f"rbs supports {SUPPORTED_FUNCTIONS}"
        )
    return fn
