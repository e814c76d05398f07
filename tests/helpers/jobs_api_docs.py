"""The jobs API's recorded responses (a test fixture), which schema each one answers to, and how
two runs' responses compare.

`normalize` replaces values that differ between runs (clock readings, the host's name,
pids and paths in rbs's own log lines, a run's peak memory) with a marker that keeps the
value's JSON type, so the shape (keys, types, nulls) is compared exactly; log lines,
whose order across tasks and pipes depends on timing, are compared as a sorted list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from rbs.wire.jobs_api_schema import REQUEST_SCHEMAS, SCHEMAS

FIXTURE = Path(__file__).with_name("jobs_api_responses.json")
# What rbs.client.jobs sent, as the server received it (jobs_api_scenario.run_client_scenario).
REQUESTS_FIXTURE = Path(__file__).with_name("jobs_api_requests.json")

# Keys whose values differ from run to run (or host to host); their JSON type must match.
VOLATILE = frozenset(
    {
        "submit_time",
        "eligible_time",
        "start_time",
        "end_time",
        "time",
        "now",
        "last_heartbeat",
        "hostname",
        "address",
        "version",
        "peak_memory_bytes",
    }
)
# Keys present only on some hosts (ClusterStatus leaves an empty list out).
HOST_ONLY = frozenset({"container_runtimes"})

Doc = Any


def _marker(value: Any) -> Any:
    return None if value is None else f"<{type(value).__name__}>"


def normalize(doc: Doc) -> Doc:
    """The document with volatile values replaced by their type (None stays None)."""
    if isinstance(doc, dict):
        out = {
            k: _marker(v) if k in VOLATILE else normalize(v)
            for k, v in doc.items()
            if k not in HOST_ONLY
        }
        if "ndjson" in out:
            out["ndjson"] = sorted(out["ndjson"], key=lambda d: json.dumps(d, sort_keys=True))
        if out.get("stream") == "sys" and "seq" in out:
            out["text"] = _marker(out["text"])  # pids, paths, cgroups, timings
        if "seq" in out:
            out["seq"] = _marker(out["seq"])  # lines of parallel tasks interleave
        return out
    if isinstance(doc, list):
        return [normalize(v) for v in doc]
    return doc


def canonical(doc: Doc) -> str:
    """The normalized document as bytes to compare: keys sorted, no whitespace choices."""
    return json.dumps(normalize(doc), sort_keys=True, separators=(",", ":"))


def load_fixture() -> dict[str, Doc]:
    data: dict[str, Doc] = json.loads(FIXTURE.read_text())
    return data


def load_requests() -> list[Doc]:
    data: list[Doc] = json.loads(REQUESTS_FIXTURE.read_text())
    return data


# Route names in the record (the part before the first dot) -> the document they answer.
_ROUTE_SCHEMA = {
    "submit": "submitted",
    "show": "job",
    "wait": "job",
    "list": "jobs",
    "outputs": "outputs",
    "cancel": "cancelled",
    "queues": "queues",
    "status": "status",
    "error": "error",
}


def documents(key: str, response: Doc) -> list[tuple[Doc, dict[str, Any]]]:
    """Each JSON document in one recorded response, with the schema it must satisfy."""
    route = key.split(".")[0]
    if "ndjson" in response:
        lines = response["ndjson"]
        return [(d, SCHEMAS["log_line"]) for d in lines[:-1]] + [(lines[-1], SCHEMAS["log_end"])]
    return [(response["json"], SCHEMAS[_ROUTE_SCHEMA[route]])]


def request_documents(request: Doc) -> list[tuple[Doc, dict[str, Any]]]:
    """Each JSON document in one recorded request (its body, or its query as an object of
    parameters), with the schema it must satisfy."""
    url = urlsplit(request["path"])
    query = dict(parse_qsl(url.query, keep_blank_values=True))
    body = request.get("body")
    if request["method"] == "POST":
        if url.path == "/v1/cas/batch":
            head = body.partition("\n")[0]
            return [(json.loads(head), REQUEST_SCHEMAS["cas_batch_head"])]
        doc = json.loads(body)
        name = {"/v1/jobs/cancel": "cancel", "/v1/cas/missing": "cas_missing"}.get(url.path)
        if name is None:
            name = "submit_flags" if "flags" in doc else "submit_manifest"
        return [(doc, REQUEST_SCHEMAS[name])]
    if url.path == "/v1/jobs":
        return [(query, REQUEST_SCHEMAS["list_query"])]
    for suffix in ("logs", "wait"):
        if url.path.endswith("/" + suffix):
            return [(query, REQUEST_SCHEMAS[f"{suffix}_query"])]
    assert not query, f"{request['path']}: a query no schema describes"
    return []
