"""The REAPI messages for the build, imported without pulling in grpc.

googleapis' `google.longrunning.operations_pb2` is a shim that imports grpc (~100 ms
here) only to re-export the very same message classes next to the gRPC stubs. A local
build needs the messages alone, so the message-only module (the shim's own fallback)
is installed under that name first. Code that needs the stubs imports
`google.longrunning.operations_pb2_grpc`, which is unaffected.
"""

from __future__ import annotations

import sys

if "google.longrunning.operations_pb2" not in sys.modules:
    from google.longrunning import operations_proto_pb2

    sys.modules["google.longrunning.operations_pb2"] = operations_proto_pb2

from rbs._proto.build.bazel.remote.execution.v2 import (
    remote_execution_pb2 as re_pb2,
)

__all__ = ["re_pb2"]
