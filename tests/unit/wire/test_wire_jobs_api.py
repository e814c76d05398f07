"""The jobs API's JSON: recorded responses satisfy their schemas, the client reads them, imports stay cheap."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

import pytest
from jobs_api_docs import documents, load_fixture
from json_schema_lite import errors

from rbs.model import JobState, LogLine, LogStream
from rbs.wire import jobs_api
from rbs.wire.jobs_api_schema import DRAFT, JOB_SCHEMA, LOG_LINE_SCHEMA, SCHEMAS

RECORDED = load_fixture()


def test_the_record_covers_every_document_and_route() -> None:
    used = {id(schema) for key, r in RECORDED.items() for _, schema in documents(key, r)}
    assert used == {id(s) for s in SCHEMAS.values()}
    for schema in SCHEMAS.values():
        assert schema["$schema"] == DRAFT and schema["title"]


@pytest.mark.parametrize("key", sorted(RECORDED))
def test_every_recorded_response_satisfies_its_schema(key: str) -> None:
    for doc, schema in documents(key, RECORDED[key]):
        assert errors(doc, schema) == []


def _show() -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(RECORDED["show.full"]["json"])
    return doc


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.pop("reason"), "missing key 'reason'"),
        (lambda d: d.update(extra=1), "unexpected key 'extra'"),
        (lambda d: d.update(job_id=4), "$.job_id: 4 is not of type string"),
        (lambda d: d.update(state="DONE"), "is not one of"),
        (lambda d: d.update(oom=None), "$.oom: None is not of type boolean"),
        (lambda d: d.update(exit_code=True), "$.exit_code: True is not of type integer/null"),
        (lambda d: d["manifest"].update(apiVersion="rbs/v2"), "$.manifest.apiVersion"),
        (lambda d: d["manifest"]["env"].update(N=1), "$.manifest.env.N"),
        (lambda d: d["runs"].append({"task": None}), "$.runs[0]: missing key 'attempt'"),
        (lambda d: d.update(array={"spec": "0-1"}), "$.array: missing key 'total'"),
    ],
)
def test_the_schemas_hold_the_shape_exactly(edit: Any, problem: str) -> None:
    doc = _show()
    assert errors(doc, JOB_SCHEMA) == []
    edit(doc)
    assert any(problem in e for e in errors(doc, JOB_SCHEMA)), errors(doc, JOB_SCHEMA)


def test_schema_enums_are_the_models() -> None:
    assert JOB_SCHEMA["properties"]["state"]["enum"] == [s.value for s in JobState]
    assert LOG_LINE_SCHEMA["properties"]["stream"]["enum"] == [s.value for s in LogStream]


def test_the_client_reads_jobs() -> None:
    info = jobs_api.job_info(RECORDED["show.fails"]["json"])
    assert (info.job_id, info.name, info.queue, info.state) == ("2", "fails", "gpu", "FAILED")
    assert info.exit_code == 3 and info.done and not info.ok
    assert info.raw is RECORDED["show.fails"]["json"]
    waiting = jobs_api.job_info(RECORDED["show.waits"]["json"])
    assert waiting.reason and not waiting.done
    listed = jobs_api.job_infos(RECORDED["list.history"]["json"])
    assert [j.job_id for j in listed] == [str(i) for i in range(1, 8)]
    assert jobs_api.submitted_id(RECORDED["submit.flags"]["json"]) == "1"


def test_the_client_reads_log_lines_and_the_end_marker() -> None:
    *lines, end = RECORDED["logs.task"]["ndjson"]
    read = [jobs_api.log_line(d) for d in lines]
    assert all(isinstance(ln, LogLine) for ln in read)
    out = [ln for ln in read if ln is not None and ln.stream is LogStream.OUT]
    assert [(ln.text, ln.task, ln.attempt, ln.rank) for ln in out] == [("task 3_1", 1, 1, 0)]
    assert jobs_api.log_line(end) is None


def test_the_client_reads_the_other_documents() -> None:
    assert jobs_api.cancelled_ids(RECORDED["cancel"]["json"]) == ["6"]
    (out,) = jobs_api.output_records(RECORDED["outputs.full"]["json"])
    assert out["task"] is None and out["digest"].startswith("blake3:")
    assert [q["name"] for q in jobs_api.queue_rows(RECORDED["queues"]["json"])] == ["batch", "gpu"]
    assert jobs_api.status_fields(RECORDED["status"]["json"])["jobs_by_state"]["COMPLETED"] == "4"


def test_the_client_side_imports_only_the_standard_library() -> None:
    code = (
        "import sys; import rbs.client.jobs; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'dataclasses', 'typing', 'inspect', 'google', 'grpc', 'click', 'aiohttp'} "
        "or m in {'rbs.model', 'rbs.wire.jobs_api_schema', 'rbs.wire.manifest'}))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert r.stdout.strip() == "[]"


def test_the_status_schema_is_cluster_status_in_protobufs_json_mapping() -> None:
    from google.protobuf.descriptor import FieldDescriptor

    from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
    from rbs.wire.jobs_api_schema import STATUS_SCHEMA

    def expect(message: Any, schema: dict[str, Any]) -> None:
        props = schema["properties"]
        assert set(props) == {f.name for f in message.DESCRIPTOR.fields}
        for f in message.DESCRIPTOR.fields:
            got = props[f.name]
            if f.is_repeated and not f.message_type:
                got = got["items"]
            if f.type in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_STRING):
                assert got["type"] == "string", f.name  # int64 is a string in JSON
            elif f.type == FieldDescriptor.TYPE_INT32:
                assert got["type"] == "integer", f.name

    expect(w_pb2.ClusterStatus, STATUS_SCHEMA)
    expect(w_pb2.WorkerStatus, STATUS_SCHEMA["properties"]["workers"]["items"])
