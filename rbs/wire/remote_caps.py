"""What a REAPI server offers (GetCapabilities), and the choices a client makes from it.

A client of a server it did not write must ask before it sends anything: which digest
functions the cache (and, for remote execution, the executor) accepts, how large a
batch call may be, and which compressors ByteStream takes. rbs hashes with BLAKE3 when
the server offers it and with SHA256 otherwise, unless the user forces one; a forced
function the server does not offer is an error that names what it does offer.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.digests import function_from_pb
from rbs.cas.errors import InvalidDigest
from rbs.model import DigestFunction
from rbs.wire.auth import auth_metadata, token_from_env
from rbs.wire.reapi_client import RemoteError

# rbs's order of preference when the server offers several.
PREFERENCE = (DigestFunction.BLAKE3, DigestFunction.SHA256)
_ZSTD = re_pb2.Compressor.ZSTD
_KNOWN = set(re_pb2.DigestFunction.Value.values())


class UnsupportedServer(ValueError):
    """The server cannot serve what this client needs (a digest function, execution)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerOffer:
    """The parts of ServerCapabilities a client acts on."""

    cache_functions: tuple[DigestFunction, ...]
    exec_functions: tuple[DigestFunction, ...]
    exec_enabled: bool
    max_batch_size: int  # 0: the server sets no limit
    zstd: bool  # ByteStream accepts compressed-blobs/zstd/...
    update_enabled: bool  # clients may write the action cache
    other_functions: tuple[str, ...] = ()  # offered, but rbs cannot hash with them


def _functions(values: list[int], others: list[str]) -> tuple[DigestFunction, ...]:
    out: list[DigestFunction] = []
    for v in values:
        try:
            fn = function_from_pb(v)
        except InvalidDigest:
            others.append(re_pb2.DigestFunction.Value.Name(v) if v in _KNOWN else str(v))
            continue
        if fn is not None and fn not in out:
            out.append(fn)
    return tuple(out)


def offer_from_pb(caps: re_pb2.ServerCapabilities) -> ServerOffer:
    cache = caps.cache_capabilities
    ex = caps.execution_capabilities
    others: list[str] = []
    cache_fns = _functions(list(cache.digest_functions), others)
    exec_values = list(ex.digest_functions) or ([ex.digest_function] if ex.digest_function else [])
    exec_fns = _functions(exec_values, others)
    if not cache_fns and not others:
        # A server that lists no cache functions hashes as it executes, or (the spec's
        # default for an unset field) with SHA256.
        cache_fns = exec_fns or (DigestFunction.SHA256,)
    return ServerOffer(
        cache_functions=cache_fns,
        exec_functions=exec_fns,
        exec_enabled=ex.exec_enabled,
        max_batch_size=cache.max_batch_total_size_bytes,
        zstd=_ZSTD in cache.supported_compressors,
        update_enabled=cache.action_cache_update_capabilities.update_enabled,
        other_functions=tuple(dict.fromkeys(others)),
    )


def read_offer(
    channel: grpc.Channel, *, instance: str = "", token: str | None = None
) -> ServerOffer:
    """Ask the server at `channel` what it offers for `instance`."""
    stub = re_grpc.CapabilitiesStub(channel)
    metadata = auth_metadata(token if token is not None else token_from_env())
    req = re_pb2.GetCapabilitiesRequest(instance_name=instance)
    try:
        caps = stub.GetCapabilities(req, metadata=metadata, timeout=60)
    except grpc.RpcError as e:
        raise RemoteError(f"GetCapabilities for instance {instance!r}", e) from None
    return offer_from_pb(caps)


def _names(fns: tuple[DigestFunction, ...], others: tuple[str, ...] = ()) -> str:
    shown = [f.value for f in fns] + [o.lower() for o in others]
    return ", ".join(shown) if shown else "none"


def choose_function(
    offer: ServerOffer, *, forced: DigestFunction | None = None, execution: bool
) -> DigestFunction:
    """The digest function to build with: `forced`, else the first of PREFERENCE that
    the server offers for the cache (and for execution, when it executes)."""
    usable = offer.cache_functions
    if execution:
        if not offer.exec_enabled:
            raise UnsupportedServer(
                "the server does not offer remote execution (its Capabilities say "
                "exec_enabled = false); use --remote-cache-only to share only its cache"
            )
        usable = tuple(f for f in usable if f in offer.exec_functions)
    if forced is not None:
        if forced not in usable:
            raise UnsupportedServer(
                f"--digest-function {forced.value}: the server does not offer it; it offers "
                f"{_names(usable, offer.other_functions)}"
            )
        return forced
    for fn in PREFERENCE:
        if fn in usable:
            return fn
    raise UnsupportedServer(
        f"the server offers no digest function rbs can use: it offers "
        f"{_names(usable, offer.other_functions)}; rbs hashes with blake3 or sha256"
    )
