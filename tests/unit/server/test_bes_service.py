"""The Build Event Service over a real gRPC channel: events are acknowledged in order,
folded into the invocation document, and saved where the dashboard reads them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest
from google.protobuf import any_pb2

from rbs._proto.build.bazel.bep import build_event_stream_pb2 as bep
from rbs._proto.google.devtools.build.v1 import publish_build_event_pb2 as pb
from rbs._proto.google.devtools.build.v1 import publish_build_event_pb2_grpc as pb_grpc
from rbs.server.bes_service import add_bes_servicer
from rbs.server.dashboard_invocations import detail_page, list_page, stderr_texts
from rbs.server.invocations import InvocationStore

INV = "0b9c7a0e-1111-4222-8333-444455556666"


def _events() -> list[bep.BuildEvent]:
    started = bep.BuildEvent(
        started=bep.BuildStarted(
            uuid=INV,
            start_time_millis=1_700_000_000_000,
            build_tool_version="4.2.3",
            command="test",
        )
    )
    started.id.started.SetInParent()
    pattern = bep.BuildEvent(expanded=bep.PatternExpanded())
    pattern.id.pattern.pattern.extend(["//:good", "//:bad"])
    progress = bep.BuildEvent(
        progress=bep.Progress(stderr="INFO: 4 processes: 2 remote cache hit, 2 linux-sandbox.\n")
    )
    failed = bep.BuildEvent(
        action=bep.ActionExecuted(
            success=False,
            exit_code=3,
            type="Genrule",
            stderr=bep.File(name="stderr", contents=b"it broke\n"),
        )
    )
    failed.id.action_completed.label = "//:bad"
    failed.id.action_completed.primary_output = "bazel-out/k8-fastbuild/bin/bad.txt"
    test = bep.BuildEvent(
        test_result=bep.TestResult(status=bep.PASSED, test_attempt_duration_millis=42)
    )
    test.id.test_result.label = "//:check"
    test.id.test_result.run = 1
    done = bep.BuildEvent(
        completed=bep.TargetComplete(success=True),
    )
    done.id.target_completed.label = "//:good"
    finished = bep.BuildEvent(
        finished=bep.BuildFinished(
            finish_time_millis=1_700_000_005_000,
            exit_code=bep.BuildFinished.ExitCode(name="BUILD_FAILURE", code=1),
        ),
        last_message=True,
    )
    return [started, pattern, progress, failed, test, done, finished]


def _requests(
    events: Sequence[bep.BuildEvent], first: int = 1
) -> list[pb.PublishBuildToolEventStreamRequest]:
    out = []
    for n, ev in enumerate(events, start=first):
        wrapped = any_pb2.Any()
        wrapped.Pack(ev)
        ordered = pb.OrderedBuildEvent(sequence_number=n, event=pb.BuildEvent(bazel_event=wrapped))
        ordered.stream_id.build_id = "b1"
        ordered.stream_id.invocation_id = INV
        ordered.stream_id.component = pb.StreamId.TOOL
        out.append(pb.PublishBuildToolEventStreamRequest(ordered_build_event=ordered))
    return out


async def _publish(port: int, reqs: Sequence[pb.PublishBuildToolEventStreamRequest]) -> list[int]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.PublishBuildEventStub(ch)
        acks = [a.sequence_number async for a in stub.PublishBuildToolEventStream(iter(reqs))]
        await stub.PublishLifecycleEvent(pb.PublishLifecycleEventRequest(project_id="p"))
    return acks


async def _serve_and_publish(
    store: InvocationStore, batches: Sequence[Sequence[pb.PublishBuildToolEventStreamRequest]]
) -> list[list[int]]:
    server = grpc.aio.server()
    add_bes_servicer(server, store)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        return [await _publish(port, b) for b in batches]
    finally:
        await server.stop(0)


def test_stream_is_acknowledged_and_recorded(tmp_path: Path) -> None:
    store = InvocationStore(tmp_path / "invocations.db")
    events = _events()
    # A first stream breaks after three events; the retry resends from event 2.
    acks = asyncio.run(
        _serve_and_publish(store, [_requests(events[:3]), _requests(events[1:], first=2)])
    )
    assert acks == [[1, 2, 3], list(range(2, 8))]
    doc = store.get(INV)
    assert doc is not None
    assert doc["command"] == "test" and doc["tool"] == "bazel 4.2.3"
    assert doc["targets"] == ["//:good", "//:bad"]
    assert doc["exit_code"] == 1 and doc["exit_name"] == "BUILD_FAILURE"
    assert doc["cache_hits"] == 2  # the progress event was folded once, not twice
    assert doc["finished"] - doc["started"] == pytest.approx(5.0)
    [failure] = doc["failures"]
    assert failure["label"] == "//:bad" and failure["exit_code"] == 3
    assert doc["tests"][0]["status"] == "PASSED" and doc["completed"] == {"//:good": True}

    [row] = store.recent()
    assert row["failures"] == 1 and row["tests"] == 1 and row["tests_failed"] == 0
    listing = list_page([row], recording=True)
    assert INV in listing and "1/1 passed" in listing and "BUILD_FAILURE (1)" in listing
    page = detail_page(doc, stderr_texts(doc, None), 0.0)
    assert "it broke" in page and "//:check" in page and "//:good //:bad" in page
    store.close()


def test_a_stream_without_invocation_id_is_refused(tmp_path: Path) -> None:
    store = InvocationStore(tmp_path / "invocations.db")
    [req] = _requests(_events()[:1])
    req.ordered_build_event.stream_id.invocation_id = ""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        asyncio.run(_serve_and_publish(store, [[req]]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "invocation_id" in (info.value.details() or "")
    assert store.recent() == []
    store.close()


def test_stderr_is_read_from_the_cas(tmp_path: Path) -> None:
    from rbs.cas.disk import DiskStore
    from rbs.model import DigestFunction

    cas = DiskStore(tmp_path / "cas")
    d = cas.put(b"error from the CAS\n", function=DigestFunction.SHA256)
    doc = {"failures": [{"stderr": {"uri": f"bytestream://h:1/blobs/{d.hash}/{d.size}"}}]}
    assert stderr_texts(doc, cas) == ["error from the CAS\n"]
    missing = {"failures": [{"stderr": {"uri": "bytestream://h:1/blobs/" + "0" * 64 + "/5"}}]}
    assert stderr_texts(missing, cas) == [None]
