"""The REAPI ActionCache service: results keyed by action digest, served only while complete.

A hit is returned only when every blob the result names (output files, output
directory trees and the files inside them, stdout/stderr digests) is still in the
CAS; otherwise the entry is dropped and the client gets NOT_FOUND, so it runs the
action again instead of failing to download an evicted output. Updates are refused
with FAILED_PRECONDITION (listing the missing blobs) when the result names blobs the
client has not uploaded yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import grpc

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.cas.errors import BlobNotFound, CorruptBlob
from rbs.cas.store import BlobStore
from rbs.model import Digest, DigestFunction
from rbs.server.ac_store import ActionResultStore
from rbs.server.cas_service import get_message
from rbs.server.instances import Instances
from rbs.wire.errors import InvalidRequest, MissingBlobs, NotFound, rpc_errors
from rbs.wire.reapi import (
    action_result_digests,
    digest_from_proto,
    request_function,
    tree_file_digests,
)

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
# Results naming this many blobs or fewer are checked on the event loop (a few stat
# calls); bigger ones, and any with output directories, go to a thread.
_INLINE_CHECK = 16
# Inlined stdout/stderr/output contents stay well inside one gRPC message.
_INLINE_LIMIT = 1 << 20


class ActionCache:
    """The domain logic below the servicer: lookups, completeness checks, updates."""

    def __init__(self, store: BlobStore, results: ActionResultStore) -> None:
        self.store = store
        self.results = results

    def missing_outputs(self, result: re_pb2.ActionResult, fn: DigestFunction) -> list[Digest]:
        """Blobs the result names that are not in the CAS (including inside output trees)."""
        named = list(action_result_digests(result, fn))
        # Checked on disk, not by the FindMissing index: a hit must never name a blob
        # removed behind the store's back (docs/design/cas.md).
        missing = self.store.check_missing(named)
        if missing:
            return missing
        inner: list[Digest] = []
        for d in result.output_directories:
            if not d.HasField("tree_digest"):
                continue
            tree_digest = digest_from_proto(d.tree_digest, fn, f"output directory {d.path!r}")
            try:
                tree = get_message(self.store, tree_digest, re_pb2.Tree(), f"tree of {d.path!r}")
            except (BlobNotFound, CorruptBlob):
                return [tree_digest]
            inner.extend(tree_file_digests(tree, fn))
        return self.store.check_missing(inner)

    def stored(self, instance: str, action: Digest) -> re_pb2.ActionResult:
        """The stored result, complete or not; NotFound when there is none."""
        data = self.results.get(instance, action)
        if data is None:
            raise NotFound(f"no cached result for action {action}")
        return re_pb2.ActionResult.FromString(data)

    def lookup(self, instance: str, action: Digest) -> re_pb2.ActionResult:
        """A complete cached result (every output present), else NotFound."""
        result = self.stored(instance, action)
        self.verify(instance, action, result)
        return result

    def verify(self, instance: str, action: Digest, result: re_pb2.ActionResult) -> None:
        """Drop the entry and raise NotFound when an output is gone from the CAS."""
        missing = self.missing_outputs(result, action.function)
        if missing:
            self.results.delete(instance, action)
            log.info(
                "dropped cached result for %s: %d output blob(s) no longer in the CAS",
                action,
                len(missing),
            )
            raise NotFound(
                f"cached result for action {action} named {len(missing)} blob(s) that are "
                f"no longer in the CAS (first: {missing[0]}); run the action again"
            )

    def update(self, instance: str, action: Digest, result: re_pb2.ActionResult) -> None:
        missing = self.missing_outputs(result, action.function)
        if missing:
            raise MissingBlobs(missing, "action result")
        self.results.put(instance, action, result.SerializeToString(deterministic=True))

    def inline(
        self,
        result: re_pb2.ActionResult,
        fn: DigestFunction,
        *,
        stdout: bool,
        stderr: bool,
        files: Iterable[str],
    ) -> None:
        """Fill the contents the client asked to have inlined, where they are small."""
        if stdout and result.HasField("stdout_digest") and not result.stdout_raw:
            d = digest_from_proto(result.stdout_digest, fn, "stdout_digest")
            if d.size <= _INLINE_LIMIT:
                result.stdout_raw = self.store.get(d)
        if stderr and result.HasField("stderr_digest") and not result.stderr_raw:
            d = digest_from_proto(result.stderr_digest, fn, "stderr_digest")
            if d.size <= _INLINE_LIMIT:
                result.stderr_raw = self.store.get(d)
        wanted = set(files)
        budget = _INLINE_LIMIT
        for f in result.output_files:
            if f.path in wanted and f.digest.size_bytes <= budget and not f.contents:
                f.contents = self.store.get(digest_from_proto(f.digest, fn, f.path))
                budget -= f.digest.size_bytes


def _is_small(result: re_pb2.ActionResult) -> bool:
    return not result.output_directories and len(result.output_files) + 2 <= _INLINE_CHECK


class ActionCacheServicer(re_grpc.ActionCacheServicer):  # type: ignore[misc]
    """Thin gRPC edge over `ActionCache`."""

    def __init__(self, cache: ActionCache, instances: Instances) -> None:
        self.cache = cache
        self.instances = instances

    @rpc_errors
    async def GetActionResult(
        self, request: re_pb2.GetActionResultRequest, context: Context
    ) -> re_pb2.ActionResult:
        instance = self.instances.check(request.instance_name)
        fn = request_function(request.digest_function, request.action_digest)
        self.instances.check_function(fn)
        action = digest_from_proto(request.action_digest, fn, "action_digest")
        found = self.cache.stored(instance, action)
        if _is_small(found):
            self.cache.verify(instance, action, found)
        else:
            await asyncio.to_thread(self.cache.verify, instance, action, found)
        if request.inline_stdout or request.inline_stderr or request.inline_output_files:
            await asyncio.to_thread(
                self.cache.inline,
                found,
                fn,
                stdout=request.inline_stdout,
                stderr=request.inline_stderr,
                files=request.inline_output_files,
            )
        return found

    @rpc_errors
    async def UpdateActionResult(
        self, request: re_pb2.UpdateActionResultRequest, context: Context
    ) -> re_pb2.ActionResult:
        instance = self.instances.check(request.instance_name)
        fn = request_function(request.digest_function, request.action_digest)
        self.instances.check_function(fn)
        action = digest_from_proto(request.action_digest, fn, "action_digest")
        if not request.HasField("action_result"):
            raise InvalidRequest("UpdateActionResult without an action_result: set the field")
        result = request.action_result
        if _is_small(result):
            self.cache.update(instance, action, result)
        else:
            await asyncio.to_thread(self.cache.update, instance, action, result)
        return result
