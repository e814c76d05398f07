"""The dashboard's Builds page on `rbs remote serve`: actions, cache hits, CAS size, recent
remote executions."""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from exec_cluster import Cluster
from reapi_actions import make_action

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2_grpc as re_grpc
from rbs.wire.reapi_client import RemoteStore

sys.path.insert(0, str(Path(__file__).parents[3] / "integration" / "server" / "dashboard"))

from dashboard_client import external_refs

pytestmark = pytest.mark.timeout(180)


def test_builds_page_counts_executions_and_cache_hits(tmp_path: Path) -> None:
    c = Cluster(tmp_path).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{c.port}") as ch:
            cas = RemoteStore(ch)
            digest = make_action(cas, ["/bin/sh", "-c", "echo built"], outputs=[])
            req = re_pb2.ExecuteRequest(
                action_digest=re_pb2.Digest(hash=digest.hash, size_bytes=digest.size),
                digest_function=re_pb2.DigestFunction.BLAKE3,
            )
            ops = list(re_grpc.ExecutionStub(ch).Execute(req, timeout=60))
            assert ops[-1].done
            ac = re_grpc.ActionCacheStub(ch)
            get = re_pb2.GetActionResultRequest(
                action_digest=req.action_digest, digest_function=req.digest_function
            )
            ac.GetActionResult(get, timeout=30)  # a hit: the action ran and was cached
            other = make_action(cas, ["/bin/sh", "-c", "echo never run"], outputs=[])
            miss = re_pb2.GetActionResultRequest(
                action_digest=re_pb2.Digest(hash=other.hash, size_bytes=other.size),
                digest_function=req.digest_function,
            )
            with pytest.raises(grpc.RpcError) as err:
                ac.GetActionResult(miss, timeout=30)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
        url = f"http://127.0.0.1:{c.port + 1}/ui/builds"
        # A call is counted once the server has sent its answer, so the client can read
        # the page a moment before the miss lands: read until both are in, within a bound.
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(url, timeout=30) as resp:  # no login on 127.0.0.1
                page = resp.read().decode()
            figures = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]*)</dd>", page))
            if "of 2 lookups" in figures["Action cache hits"] or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        c.stop()
    assert figures["Actions running"] == "0" and figures["Actions queued"] == "0"
    assert figures["Action cache hits"] == "50.0% of 2 lookups"
    # As /metrics reads it: the store's walk is cached for a minute (rbs.server.metrics).
    assert re.fullmatch(r"[\d.]+ ?[KMGT]?i?B? in [\d,]+ blobs", figures["CAS size"]), figures
    table = page.split('id="executions"')[1]
    assert digest.hash[:16] in table and "COMPLETED" in table
    assert other.hash[:16] not in table
    assert external_refs(page) == []
