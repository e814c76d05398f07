"""A small Build Event Service client: `rbs build` and `rbs test` publish their own
invocation to a server's `google.devtools.build.v1.PublishBuildEvent`, as Bazel does with
--bes_backend, so the dashboard's Invocations pages show both the same way.

The invocation is sent once it has ended, as one PublishBuildToolEventStream of Bazel's
event kinds (build_event_stream.BuildEvent in an Any): started, the command line, the
target patterns, a progress line, each failed action with its stderr inline, each test
result, the action counts and the finish with its exit code."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from google.protobuf import any_pb2

from rbs._proto.build.bazel.bep import build_event_stream_pb2 as bep
from rbs._proto.google.devtools.build.v1 import publish_build_event_pb2 as pb
from rbs._proto.google.devtools.build.v1 import publish_build_event_pb2_grpc as pb_grpc
from rbs.wire.auth import auth_metadata
from rbs.wire.reapi_client import connect

MAX_STDERR = 64 * 1024  # bytes of one failure's output sent inline


@dataclass(slots=True)
class ActionFailure:
    label: str
    mnemonic: str
    output: str
    message: str


@dataclass(slots=True)
class TestOutcome:
    label: str
    passed: bool
    cached: bool
    log: bytes = b""


@dataclass(slots=True)
class Invocation:
    command: str  # "build" or "test"
    args: Sequence[str]
    patterns: Sequence[str]
    tool_version: str
    started: float  # seconds since the epoch
    finished: float
    exit_code: int
    actions_executed: int
    actions_total: int
    summary: str  # the line rbs printed (its cache hits are read from it)
    failures: list[ActionFailure] = field(default_factory=list)
    tests: list[TestOutcome] = field(default_factory=list)
    id: str = field(default_factory=lambda: str(uuid.uuid4()))


def _events(inv: Invocation) -> Iterator[bep.BuildEvent]:
    ev = bep.BuildEvent(
        started=bep.BuildStarted(
            uuid=inv.id,
            start_time_millis=int(inv.started * 1000),
            build_tool_version=inv.tool_version,
            command=inv.command,
        )
    )
    ev.id.started.SetInParent()
    yield ev
    ev = bep.BuildEvent(unstructured_command_line=bep.UnstructuredCommandLine(args=inv.args))
    ev.id.unstructured_command_line.SetInParent()
    yield ev
    ev = bep.BuildEvent(expanded=bep.PatternExpanded())
    ev.id.pattern.pattern.extend(inv.patterns)
    yield ev
    for f in inv.failures:
        text = f.message.encode("utf-8", "replace")[:MAX_STDERR]
        ev = bep.BuildEvent(
            action=bep.ActionExecuted(
                success=False,
                exit_code=1,
                type=f.mnemonic,
                stderr=bep.File(name="stderr", contents=text),
            )
        )
        ev.id.action_completed.label = f.label
        ev.id.action_completed.primary_output = f.output
        yield ev
    for t in inv.tests:
        ev = bep.BuildEvent(
            test_result=bep.TestResult(
                status=bep.PASSED if t.passed else bep.FAILED,
                cached_locally=t.cached,
                test_action_output=[bep.File(name="test.log", contents=t.log[-MAX_STDERR:])],
            )
        )
        ev.id.test_result.label = t.label
        ev.id.test_result.run = ev.id.test_result.shard = ev.id.test_result.attempt = 1
        yield ev
    ev = bep.BuildEvent(progress=bep.Progress(stderr=inv.summary + "\n"))
    ev.id.progress.opaque_count = 1
    yield ev
    ev = bep.BuildEvent(
        build_metrics=bep.BuildMetrics(
            action_summary=bep.BuildMetrics.ActionSummary(
                actions_executed=inv.actions_executed, actions_created=inv.actions_total
            )
        )
    )
    ev.id.build_metrics.SetInParent()
    yield ev
    name = "SUCCESS" if inv.exit_code == 0 else "FAILED"
    ev = bep.BuildEvent(
        finished=bep.BuildFinished(
            overall_success=inv.exit_code == 0,
            finish_time_millis=int(inv.finished * 1000),
            exit_code=bep.BuildFinished.ExitCode(name=name, code=inv.exit_code),
        ),
        last_message=True,
    )
    ev.id.build_finished.SetInParent()
    yield ev


def requests(inv: Invocation) -> list[pb.PublishBuildToolEventStreamRequest]:
    out = []
    for n, ev in enumerate(_events(inv), start=1):
        wrapped = any_pb2.Any()
        wrapped.Pack(ev)
        ordered = pb.OrderedBuildEvent(sequence_number=n, event=pb.BuildEvent(bazel_event=wrapped))
        ordered.stream_id.build_id = inv.id
        ordered.stream_id.invocation_id = inv.id
        ordered.stream_id.component = pb.StreamId.TOOL
        out.append(pb.PublishBuildToolEventStreamRequest(ordered_build_event=ordered))
    return out


def publish(target: str, inv: Invocation, *, token: str | None, timeout: float = 30.0) -> None:
    """Send `inv` to the Build Event Service at `target` (HOST:PORT or grpc[s]://...).
    Raises ValueError for a bad address and grpc.RpcError when the server refuses."""
    reqs = requests(inv)
    with connect(target) as channel:
        stub = pb_grpc.PublishBuildEventStub(channel)
        acks = stub.PublishBuildToolEventStream(
            iter(reqs), metadata=auth_metadata(token), timeout=timeout
        )
        seen = [a.sequence_number for a in acks]
    if seen != list(range(1, len(reqs) + 1)):
        raise ValueError(f"the server acknowledged events {seen}, not 1..{len(reqs)}")
