"""Protobuf wire encoding written by hand, for tests that build requests protobuf itself
would never write (fields out of order, long varints, unknown fields)."""

from __future__ import annotations


def varint(n: int) -> bytes:
    """`n` as a base-128 varint (a negative one as its 64-bit two's complement)."""
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    """One field: its key, then `payload` (length-prefixed for wire type 2)."""
    if wire == 2:
        return varint(number << 3 | 2) + varint(len(payload)) + payload
    return varint(number << 3 | wire) + payload
