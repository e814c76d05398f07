"""Message-size limits shared by rbs's gRPC clients and server (REAPI batches, channel options),
and the nesting depth of a JSON body."""

from __future__ import annotations

import re

# The largest BatchUpdateBlobs/BatchReadBlobs payload, unless the server is told otherwise.
DEFAULT_BATCH_SIZE = 4 << 20
# Room for framing and per-blob overhead above the advertised batch limit, so a batch
# that respects the limit always fits in one gRPC message.
MESSAGE_HEADROOM = 1 << 20

# JSON strings (with their escapes) and the brackets outside them.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(data: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (0 for a scalar), found
    without parsing it: Python's parser recurses, so a 100,000-deep body must be
    refused before it is parsed. Brackets inside strings do not count."""
    depth = deepest = 0
    for m in _JSON_BRACKET.finditer(_JSON_STRING.sub(b'""', data)):
        if m.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest
