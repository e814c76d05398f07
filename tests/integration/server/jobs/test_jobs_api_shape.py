"""The jobs API answers every route with exactly the JSON it answered before rbs.wire.jobs_api,
and the client sends exactly the requests it sent before the request documents moved there.

A live in-process cluster walks the fixed scenario; each response, normalized (volatile
values replaced by their type), must be byte-identical to the recorded one, and must
satisfy its JSON Schema. A second walk drives every route through rbs.client.jobs; each
request the server receives (method, path and query, body bytes) must be the recorded one.
"""

from __future__ import annotations

from pathlib import Path

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
        for i, (want, got) in enumerate(zip(recorded, live, strict=False))
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
