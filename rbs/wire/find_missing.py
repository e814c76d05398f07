"""FindMissingBlobs on the wire's bytes: a request read in bulk, an answer joined from its parts.

A FindMissingBlobs of 100,000 digests is about 7 MB. Parsed into messages, reading each
entry's hash and size back out costs ~0.35 µs a field, more than the lookup itself; so
the server takes the request as bytes (`read_request`) and reads it here with a few C
passes, when it is in the canonical encoding every protobuf library writes:

    [0a <len> instance_name]  (12 <len> 0a 40 <64 hex> [10 <varint size>])*  [18 <function>]

fields in number order, each digest exactly a 64-character hash and a size (left out
when 0), sizes as shortest varints of at most 9 bytes (so not negative), the function
one byte. A compiled regex with one alternative per varint length finds the entries
(the length byte must agree with the size's length), and the matches must tile the
whole run of digests; `binascii.unhexlify` checks each hash's hex digits as it reads
it into a key, and one `islower` over them all that none is uppercase.
Such bytes have only one parse, which this one is, so the answer is protobuf's.
Anything else (unknown fields, another field order, repeated scalars, a wrong hash, a
negative size, non-minimal varints, a hash that is not hex) returns None, and the
caller parses the request with protobuf (`decode_request`), whose answer, and whose
precise INVALID_ARGUMENT naming the bad entry, it then gives.

The answer (`FindMissingBlobsResponse`, digests in field 2 as in the request) is the
missing entries' own bytes joined: a canonical entry is what protobuf writes for it.
"""

from __future__ import annotations

import binascii
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, repeat
from typing import cast

from google.protobuf.message import DecodeError

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs.wire.errors import InvalidRequest

METHOD = "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs"
# Typed for `map` (the builtin's own signature is overloaded).
_from_bytes = cast(Callable[[bytes, str], int], int.from_bytes)
_HASH = slice(4, 68)  # of an entry: 12 <len> 0a 40 <hash> [10 <size>]
_SIZE = slice(69, None)


def _entry_pattern() -> re.Pattern[bytes]:
    # One alternative per size length (none, 1 to 9 varint bytes): the entry's length
    # byte says which. The last varint byte is never 0 (shortest encoding; a size of 0
    # is left out).
    alts = [rb"\x42\x0a\x40.{64}"]
    for n in range(1, 10):
        more = rb"[\x80-\xff]{%d}" % (n - 1) if n > 1 else b""
        alts.append(re.escape(bytes([0x43 + n])) + rb"\x0a\x40.{64}\x10" + more + rb"[\x01-\x7f]")
    return re.compile(rb"\x12(?:" + b"|".join(alts) + rb")", re.DOTALL)


_ENTRY = _entry_pattern()


@dataclass(frozen=True)
class BulkRequest:
    """A FindMissingBlobs request read off canonical bytes.

    `entries` are the digests' encoded fields as they came (the answer is made of them),
    `keys` their hashes' 32 bytes (`bytes.fromhex(hash)`), `codes` their sizes' varints read
    as little-endian integers (0 for the empty blob): rbs.cas.presence's `blob_key` and
    `size_code`."""

    instance_name: str
    digest_function: int
    entries: list[bytes]
    keys: list[bytes]
    codes: list[int]


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at` and where it ends; (-1, at) when it does not end within 10 bytes."""
    value = 0
    for i in range(10):
        if at + i >= len(data):
            break
        b = data[at + i]
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return value, at + i + 1
    return -1, at


def read_request(data: bytes) -> BulkRequest | None:
    """The request, if `data` is in the canonical encoding; None to parse it with protobuf."""
    at, name = 0, ""
    if data[:1] == b"\x0a":
        n, at = _varint(data, 1)
        if n < 0 or at + n > len(data):
            return None
        try:
            name = data[at : at + n].decode("utf-8")
        except UnicodeDecodeError:
            return None
        at += n
    end, function = len(data), 0
    if end - 2 >= at and data[end - 2] == 0x18 and 0 < data[end - 1] < 0x80:
        end, function = end - 2, data[end - 1]
    entries = _ENTRY.findall(data, at, end)
    # Matches never overlap, so lengths that add up to the run mean they tile it.
    if sum(map(len, entries)) != end - at:
        return None
    hashes: list[bytes] = list(map(operator.getitem, entries, repeat(_HASH)))
    try:  # hex digits (either case), each hash read into its bytes on the way
        keys: list[bytes] = list(map(binascii.unhexlify, hashes))
    except binascii.Error:
        return None
    # Lowercase: no A-F anywhere, and a letter somewhere (all digits, at odds of 1e-13
    # per honest hash, goes to protobuf too, which takes it).
    if hashes and not b"".join(hashes).islower():
        return None
    sizes: list[bytes] = list(map(operator.getitem, entries, repeat(_SIZE)))
    codes: list[int] = list(map(_from_bytes, sizes, repeat("little")))
    return BulkRequest(name, function, entries, keys, codes)


def missing_response(request: BulkRequest, present: list[bool]) -> bytes:
    """The encoded FindMissingBlobsResponse: each entry not present, once, in the order
    asked (a repeated digest is the same bytes, so the first stays)."""
    return b"".join(dict.fromkeys(compress(request.entries, map(operator.not_, present))))


def decode_request(data: bytes) -> re_pb2.FindMissingBlobsRequest:
    """The request parsed by protobuf; INVALID_ARGUMENT when it is not one."""
    try:
        return re_pb2.FindMissingBlobsRequest.FromString(data)
    except DecodeError as e:
        raise InvalidRequest(
            f"the request to {METHOD} is not a valid protobuf message of its type: {e}"
        ) from None


def encode_response(response: re_pb2.FindMissingBlobsResponse) -> bytes:
    return bytes(response.SerializeToString())
