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

from rbs.wire.jobs_api_schema import SCHEMAS

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
