"""The REAPI Capabilities service: what this server offers, as Bazel and other clients check it.

API versions 2.0 to 2.3. Digest functions SHA256 and BLAKE3 for the cache and for
execution, or those `[server] digest_functions` lists; the singular
`execution_capabilities.digest_function` is SHA256 (when offered) because older
clients (Bazel 4) read only that field. ZSTD is offered for ByteStream and
batch transfers. Execution is advertised only when an Execution service is
registered on the same server.
"""

from __future__ import annotations

from typing import Any

import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs._proto.build.bazel.semver import semver_pb2
from rbs.cas.digests import SUPPORTED_PB_FUNCTIONS, function_to_pb
from rbs.model import DigestFunction
from rbs.server.instances import Instances
from rbs.wire.errors import rpc_errors

_DF = re_pb2.DigestFunction
_C = re_pb2.Compressor
LOW_API = (2, 0)
HIGH_API = (2, 3)


def server_capabilities(
    *,
    max_batch_size: int,
    exec_enabled: bool,
    functions: tuple[DigestFunction, ...] | None = None,
) -> re_pb2.ServerCapabilities:
    offered = [function_to_pb(f) for f in functions] if functions else list(SUPPORTED_PB_FUNCTIONS)
    single = _DF.SHA256 if _DF.SHA256 in offered else offered[0]
    return re_pb2.ServerCapabilities(
        cache_capabilities=re_pb2.CacheCapabilities(
            digest_functions=offered,
            action_cache_update_capabilities=re_pb2.ActionCacheUpdateCapabilities(
                update_enabled=True
            ),
            max_batch_total_size_bytes=max_batch_size,
            symlink_absolute_path_strategy=re_pb2.SymlinkAbsolutePathStrategy.DISALLOWED,
            supported_compressors=[_C.ZSTD],
            supported_batch_update_compressors=[_C.ZSTD],
        ),
        execution_capabilities=re_pb2.ExecutionCapabilities(
            digest_function=single,
            digest_functions=offered,
            exec_enabled=exec_enabled,
        ),
        low_api_version=semver_pb2.SemVer(major=LOW_API[0], minor=LOW_API[1]),
        high_api_version=semver_pb2.SemVer(major=HIGH_API[0], minor=HIGH_API[1]),
    )


class CapabilitiesServicer(re_grpc.CapabilitiesServicer):  # type: ignore[misc]
    """Answers GetCapabilities with a message built once at start-up."""

    def __init__(self, capabilities: re_pb2.ServerCapabilities, instances: Instances) -> None:
        self.capabilities = capabilities
        self.instances = instances

    @rpc_errors
    async def GetCapabilities(
        self, request: re_pb2.GetCapabilitiesRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> re_pb2.ServerCapabilities:
        self.instances.check(request.instance_name)
        return self.capabilities
