"""The jobs API answers every route with exactly the JSON it answered before rbs.wire.jobs_api,
and the client sends exactly the requests it sent before the request documents moved there.

A live in-process cluster walks the fixed scenario; each response, normalized (volatile
values replaced by their type), must be byte-identical to the recorded one, and must
satisfy its JSON Schema. A second walk drives every route through rbs.client.jobs; each
request the server receives (method, path and query, body bytes) must be the recorded one,
except a submit's `request_id`, fresh per call (recorded before it existed): each submit
must end with one, a UUID no other submit used, and the rest of its bytes must match.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jobs_api_docs import canonical, documents, load_fixture, load_requests, request_documents
from jobs_api_scenario import SCENARIO_JOBS, recorded_requests, run_client_scenario, run_scenario
from jobs_harness import JobCluster
from json_schema_lite import errors


def test_every_route_answers_the_recorded_json_and_its_schema(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server", jobs=SCENARIO_JOBS)
    try:
        live = run_scenario(cluster, tmp_path)
    finally:
        cluster.stop()
    recorded = load_fixture()
    assert sorted(live) == sorted(recorded)
    changed = [key for key in recorded if canonical(live[key]) != canonical(recorded[key])]
    assert not changed, "\n".join(
        f"{key}:\n  recorded {canonical(recorded[key])}\n  live     {canonical(live[key])}"
        for key in changed
    )
    problems = [
        f"{key}: {e}"
        for key, response in live.items()
        for doc, schema in documents(key, response)
        for e in errors(doc, schema)
    ]
    assert not problems, "\n".join(problems)
    # The error documents come with their HTTP status; every other route answers 200.
    for key, response in live.items():
        assert (response["status"] >= 400) == key.startswith("error."), key


_REQUEST_ID = re.compile(
    r',"request_id":"([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})"\}$'
)


def _without_request_ids(live: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests with each submit's request id cut out; every submit must carry its own."""
    out, ids = [], []
    for r in live:
        if r["method"] == "POST" and r["path"] == "/v1/jobs":
            m = _REQUEST_ID.search(r["body"])
            assert m, f"a submit without a request_id: {r['body']}"
            ids.append(m.group(1))
            r = {**r, "body": r["body"][: m.start()] + "}"}
        out.append(r)
    assert len(set(ids)) == len(ids), f"a request id used twice: {ids}"
    return out


def test_the_client_sends_the_recorded_requests(tmp_path: Path) -> None:
    with recorded_requests() as seen:
        cluster = JobCluster(tmp_path / "server", jobs=SCENARIO_JOBS)
    try:
        live = run_client_scenario(cluster, tmp_path, seen)
    finally:
        cluster.stop()
    recorded = load_requests()
    changed = [
        f"request {i}:\n  recorded {want}\n  live     {got}"
        for i, (want, got) in enumerate(zip(recorded, _without_request_ids(live), strict=False))
        if want != got
    ]
    assert not changed, "\n".join(changed)
    assert len(live) == len(recorded)
    problems = [
        f"{r['method']} {r['path']}: {e}"
        for r in live
        for doc, schema in request_documents(r)
        for e in errors(doc, schema)
    ]
    assert not problems, "\n".join(problems)
