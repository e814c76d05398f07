"""The Build Event Service (`google.devtools.build.v1.PublishBuildEvent`) that
`bazel --bes_backend=grpc://HOST:PORT` streams each invocation to.

PublishBuildToolEventStream carries Bazel's Build Event Protocol (each event an Any of
`build_event_stream.BuildEvent`); `Recorder` folds those into the invocation document
that `InvocationStore` keeps and the dashboard shows. Every event is acknowledged in
order, as Bazel expects; a retried stream resends from its first unacknowledged event,
and events already folded (by sequence number) are acknowledged again and skipped.
Lifecycle events carry nothing rbs records and are accepted."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError

from rbs._proto.build.bazel.bep import build_event_stream_pb2 as bep
from rbs._proto.google.devtools.build.v1 import publish_build_event_pb2 as pb
from rbs._proto.google.devtools.build.v1 import publish_build_event_pb2_grpc as pb_grpc
from rbs.server.invocations import InvocationStore
from rbs.wire.errors import InvalidRequest, rpc_errors

log = logging.getLogger(__name__)

BEP_TYPE = "type.googleapis.com/build_event_stream.BuildEvent"
MAX_CONSOLE = 256 * 1024  # bytes of console output kept per invocation
MAX_LIVE = 1_000  # invocations streaming at once
# Bazel's "N remote cache hit" (or disk) and rbs build's "N cache hits".
_CACHE_HITS = re.compile(r"(\d+) (?:remote |disk )?cache hits?\b")
_SAVE_EVERY = 2.0  # seconds between saves while a stream runs


def _millis(ms: int) -> float | None:
    return ms / 1000.0 if ms else None


def _file(f: bep.File) -> dict[str, Any] | None:
    kind = f.WhichOneof("file")
    if kind == "uri":
        return {"name": f.name, "uri": f.uri}
    if kind == "contents":
        return {"name": f.name, "text": f.contents[:MAX_CONSOLE].decode("utf-8", "replace")}
    return None


class Recorder:
    """One invocation's document, built event by event."""

    def __init__(self, inv_id: str, build_id: str) -> None:
        self.doc: dict[str, Any] = {
            "id": inv_id,
            "build_id": build_id,
            "tool": "",
            "command": "",
            "args": [],
            "targets": [],
            "started": time.time(),
            "finished": None,
            "exit_code": None,
            "exit_name": "",
            "actions_executed": None,
            "actions_created": None,
            "cache_hits": None,
            "failures": [],
            "tests": [],
            "completed": {},
            "console": "",
        }
        self.last_seq = 0
        self.saved_at = 0.0

    def fold(self, ev: bep.BuildEvent) -> None:
        d = self.doc
        kind = ev.WhichOneof("payload")
        if kind == "started":
            s = ev.started
            version = s.build_tool_version
            d["tool"] = version if version.startswith("rbs") else f"bazel {version}".strip()
            d["command"] = s.command
            d["workspace"] = s.workspace_directory
            if s.start_time_millis:
                d["started"] = s.start_time_millis / 1000.0
        elif kind == "unstructured_command_line":
            d["args"] = list(ev.unstructured_command_line.args)
        elif kind == "expanded" and ev.id.WhichOneof("id") == "pattern":
            d["targets"] = list(ev.id.pattern.pattern)
        elif kind == "progress":
            self._console(ev.progress.stdout + ev.progress.stderr)
        elif kind == "action" and not ev.action.success:
            a = ev.action
            d["failures"].append(
                {
                    "label": ev.id.action_completed.label,
                    "output": ev.id.action_completed.primary_output,
                    "type": a.type,
                    "exit_code": a.exit_code,
                    "stderr": _file(a.stderr) if a.HasField("stderr") else None,
                    "command_line": list(a.command_line)[:200],
                }
            )
        elif kind == "completed" and ev.id.WhichOneof("id") == "target_completed":
            d["completed"][ev.id.target_completed.label] = ev.completed.success
        elif kind == "aborted":
            label = ev.id.target_completed.label or ev.id.WhichOneof("id") or ""
            d.setdefault("aborted", []).append(
                {"what": label, "description": ev.aborted.description}
            )
        elif kind == "test_result":
            self._test(ev)
        elif kind == "build_metrics":
            summary = ev.build_metrics.action_summary
            d["actions_executed"] = summary.actions_executed
            d["actions_created"] = summary.actions_created
        elif kind == "finished":
            f = ev.finished
            d["finished"] = _millis(f.finish_time_millis) or time.time()
            code = f.exit_code.code if f.HasField("exit_code") else (0 if f.overall_success else 1)
            d["exit_code"] = code
            d["exit_name"] = f.exit_code.name if f.HasField("exit_code") else ""

    def _test(self, ev: bep.BuildEvent) -> None:
        t, tid = ev.test_result, ev.id.test_result
        logs = [x for x in (_file(f) for f in t.test_action_output) if x is not None]
        self.doc["tests"].append(
            {
                "label": tid.label,
                "run": tid.run,
                "shard": tid.shard,
                "attempt": tid.attempt,
                "status": bep.TestStatus.Name(t.status),
                "details": t.status_details,
                "duration_ms": t.test_attempt_duration_millis,
                "cached": t.cached_locally,
                "logs": logs,
            }
        )

    def _console(self, text: str) -> None:
        if not text:
            return
        d = self.doc
        room = MAX_CONSOLE - len(d["console"])
        if room > 0:
            d["console"] += text[:room]
        hits = [int(n) for n in _CACHE_HITS.findall(text)]
        if hits:
            d["cache_hits"] = sum(hits)


class BuildEventServicer(pb_grpc.PublishBuildEventServicer):  # type: ignore[misc]
    def __init__(self, store: InvocationStore) -> None:
        self.store = store
        self.live: dict[str, Recorder] = {}

    @rpc_errors
    async def PublishLifecycleEvent(
        self, request: pb.PublishLifecycleEventRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> empty_pb2.Empty:
        return empty_pb2.Empty()

    @rpc_errors
    async def PublishBuildToolEventStream(
        self,
        request_iterator: AsyncIterator[pb.PublishBuildToolEventStreamRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.PublishBuildToolEventStreamResponse]:
        rec: Recorder | None = None
        try:
            async for req in request_iterator:
                ordered = req.ordered_build_event
                sid = ordered.stream_id
                if not sid.invocation_id:
                    raise InvalidRequest("ordered_build_event.stream_id.invocation_id is empty")
                rec = rec or self._recorder(sid.invocation_id, sid.build_id)
                if ordered.sequence_number > rec.last_seq:
                    await self._fold(rec, ordered)
                    rec.last_seq = ordered.sequence_number
                yield pb.PublishBuildToolEventStreamResponse(
                    stream_id=sid, sequence_number=ordered.sequence_number
                )
        finally:
            if rec is not None:
                await asyncio.to_thread(self.store.put, rec.doc)
                if rec.doc["finished"] is not None:
                    self.live.pop(rec.doc["id"], None)

    def _recorder(self, inv_id: str, build_id: str) -> Recorder:
        rec = self.live.get(inv_id)
        if rec is None:
            if len(self.live) >= MAX_LIVE:  # forget the oldest stream that never finished
                self.live.pop(next(iter(self.live)))
            rec = self.live[inv_id] = Recorder(inv_id, build_id)
        return rec

    async def _fold(
        self,
        rec: Recorder,
        ordered: pb.OrderedBuildEvent,
    ) -> None:
        event = ordered.event
        if event.WhichOneof("event") != "bazel_event":
            return
        anything = event.bazel_event
        if anything.type_url != BEP_TYPE:
            return  # another tool's events: acknowledged, not recorded
        ev = bep.BuildEvent()
        try:
            ev.ParseFromString(anything.value)
        except DecodeError:
            raise InvalidRequest(
                f"event {ordered.sequence_number}: bazel_event is not a valid "
                "build_event_stream.BuildEvent"
            ) from None
        rec.fold(ev)
        now = time.monotonic()
        first = ev.WhichOneof("payload") == "started"
        if first or ev.last_message or now - rec.saved_at >= _SAVE_EVERY:
            rec.saved_at = now
            await asyncio.to_thread(self.store.put, rec.doc)


def add_bes_servicer(server: grpc.aio.Server, store: InvocationStore) -> None:
    pb_grpc.add_PublishBuildEventServicer_to_server(BuildEventServicer(store), server)
