"""Message-size limits shared by rbs's gRPC clients and server (REAPI batches, channel options)."""

from __future__ import annotations

# The largest BatchUpdateBlobs/BatchReadBlobs payload, unless the server is told otherwise.
DEFAULT_BATCH_SIZE = 4 << 20
# Room for framing and per-blob overhead above the advertised batch limit, so a batch
# that respects the limit always fits in one gRPC message.
MESSAGE_HEADROOM = 1 << 20
