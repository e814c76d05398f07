"""The jobs HTTP API's JSON documents as JSON Schema (draft 2020-12): one constant per document.

`rbs.wire.jobs_api` builds (server) and reads (client) the responses, `SCHEMAS`;
`rbs.wire.jobs_api_requests` builds (client) and reads (server) the requests,
`REQUEST_SCHEMAS` (a query is described as the object of its parameters). This module
says what they are, key by key, so the shape is written down once and tests can hold
every response and every request the client sends to it. Nothing at run time needs it,
so the client never imports it.
"""

from __future__ import annotations

from typing import Any

from rbs.model import JobState, LogStream

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_STR: dict[str, Any] = {"type": "string"}
_INT: dict[str, Any] = {"type": "integer"}
_NUM: dict[str, Any] = {"type": "number"}
_BOOL: dict[str, Any] = {"type": "boolean"}
_STATE: dict[str, Any] = {"type": "string", "enum": [s.value for s in JobState]}


def _obj(props: dict[str, Any], *, optional: bool = False) -> dict[str, Any]:
    """An object with exactly these keys (all of them required unless `optional`)."""
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if not optional:
        schema["required"] = sorted(props)
    schema["additionalProperties"] = False
    return schema


def _null(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "type": [schema["type"], "null"]}


def _list(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


def _map(values: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": values}


def _document(title: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": DRAFT, "title": title, **body}


_RESOURCES = _obj({"cpu": _STR, "memory": _STR, "gpus": _INT})
# rbs.wire.manifest.manifest_to_dict: the canonical manifest, every field present.
_MANIFEST = _obj(
    {
        "apiVersion": {"const": "rbs/v1"},
        "name": _STR,
        "command": _list(_STR),
        "input_root": _null(_STR),
        "resources": _RESOURCES,
        "queue": _STR,
        "priority": _INT,
        "time_limit": _null(_INT),
        "nodes": _INT,
        "elastic": _BOOL,
        "min_nodes": _null(_INT),
        "max_nodes": _null(_INT),
        "max_retries": _INT,
        "requeue": _BOOL,
        "restarts": _INT,
        "checkpoint_dir": _null(_STR),
        "env": _map(_STR),
        "outputs": _list(_STR),
        "secrets": _list(_STR),
        "array": _null(_STR),
        "dependencies": _list(_STR),
        "begin_time": _null(_NUM),
        "deadline": _null(_NUM),
    }
)
# Container jobs only: a manifest carries them when it names an image.
_MANIFEST["properties"] |= {"container": _STR, "network": _STR}
_MANIFEST["properties"] |= {"cpu_cores": _STR, "max_iobps": _INT}  # present when set
_MANIFEST["properties"] |= {"preemptible": _BOOL, "interactive": _BOOL, "pty": _BOOL}  # if true
_JOB = _obj(
    {
        "job_id": _STR,
        "name": _STR,
        "queue": _STR,
        "state": _STATE,
        "reason": _null(_STR),
        "priority": _obj({"base": _INT, "queue_weight": _INT, "age_bonus": _INT, "total": _INT}),
        "manifest": _MANIFEST,
        "provenance": _map(_STR),
        "resources": _RESOURCES,
        "time_limit": _null(_STR),
        "dependencies": _list(_obj({"dep": _STR, "state": _STATE})),
        "array": _null(
            _obj(
                {
                    "spec": _STR,
                    "total": _INT,
                    "pending": _INT,
                    "running": _INT,
                    "finished": _map(_INT),
                }
            )
        ),
        "attempts": _INT,
        "workers": _list(_STR),
        "runs": _list(
            _obj(
                {
                    "task": _null(_INT),
                    "attempt": _INT,
                    "state": _STATE,
                    "workers": _list(_STR),
                    "gpus": _list(_list(_STR)),
                }
            )
        ),
        "history": _list(
            _obj(
                {
                    "task": _null(_INT),
                    "attempt": _INT,
                    "state": _STATE,
                    "reason": _null(_STR),
                    "workers": _list(_STR),
                    "start_time": _NUM,
                    "end_time": _null(_NUM),
                    "exit_code": _null(_INT),
                    "signal": _null(_INT),
                }
            )
        ),
        "exit_code": _null(_INT),
        "signal": _null(_INT),
        "oom": _BOOL,
        "peak_memory_bytes": _null(_INT),
        "submit_time": _NUM,
        "eligible_time": _null(_NUM),
        "start_time": _null(_NUM),
        "end_time": _null(_NUM),
        # Who submitted it ("unknown" for jobs from before owners were recorded), the
        # job whose run submitted it, and who changed it (cancelled it or its tasks).
        "user": _STR,
        "parent": _null(_STR),
        "changes": _list(_obj({"action": _STR, "by": _STR, "time": _NUM})),
    }
)
_QUEUE = _obj(
    {
        "name": _STR,
        "priority_weight": _INT,
        "default_time_limit": _null(_STR),
        "max_time_limit": _null(_STR),
        "pending_jobs": _INT,
        "running_jobs": _INT,
        "pending_tasks": _INT,
        "running_tasks": _INT,
    }
)
# rbs.v1.ClusterStatus in protobuf's JSON mapping: fields at their zero value are left
# out, int64 fields are strings, timestamps RFC 3339 strings.
_WORKER = _obj(
    {
        "worker_id": _STR,
        "name": _STR,
        "hostname": _STR,
        "address": _STR,
        "cpus": _INT,
        "memory_bytes": _STR,
        "gpu_ids": _list(_STR),
        "build_slots": _INT,
        "build_slots_used": _INT,
        "job_slots": _INT,
        "job_slots_used": _INT,
        "state": _STR,
        "last_heartbeat": _STR,
        "version": _STR,
        "container_runtimes": _list(_STR),
        "images": _list(
            _obj({"image_id": _STR, "names": _list(_STR), "size_bytes": _STR}, optional=True)
        ),
        "can_pull_images": _BOOL,
    },
    optional=True,
)

SUBMITTED_SCHEMA = _document("POST /v1/jobs", _obj({"job_id": _STR}))
JOB_SCHEMA = _document("GET /v1/jobs/{id}, GET /v1/jobs/{id}/wait", _JOB)
JOBS_SCHEMA = _document(
    "GET /v1/jobs: one page of jobs, how many match, and the cursor of the next page",
    _obj({"jobs": _list(_JOB), "total": _INT, "next_cursor": _null(_STR)}),
)
LOG_LINE_SCHEMA = _document(
    "GET /v1/jobs/{id}/logs: one NDJSON line per log line",
    _obj(
        {
            "seq": _INT,
            "time": _NUM,
            "stream": {"type": "string", "enum": [s.value for s in LogStream]},
            "text": _STR,
            "task": _null(_INT),
            "attempt": _INT,
            "rank": _INT,
        }
    ),
)
LOG_END_SCHEMA = _document(
    "GET /v1/jobs/{id}/logs: the last NDJSON line", _obj({"end": {"const": True}, "state": _STATE})
)
OUTPUTS_SCHEMA = _document(
    "GET /v1/jobs/{id}/outputs",
    _obj({"outputs": _list(_obj({"task": _null(_INT), "attempt": _INT, "digest": _STR}))}),
)
CANCELLED_SCHEMA = _document("POST /v1/jobs/cancel", _obj({"cancelled": _list(_STR)}))
QUEUES_SCHEMA = _document("GET /v1/queues", _obj({"queues": _list(_QUEUE)}))
STATUS_SCHEMA = _document(
    "GET /v1/status",
    _obj(
        {
            "workers": _list(_WORKER),
            "queued_actions": _STR,
            "running_actions": _STR,
            "jobs_by_state": _obj(dict.fromkeys((s.value for s in JobState), _STR), optional=True),
            "now": _STR,
        },
        optional=True,
    ),
)
ERROR_SCHEMA = _document(
    "any route's error (HTTP 4xx/5xx)", _obj({"error": _obj({"code": _STR, "message": _STR})})
)
SCHEMAS: dict[str, dict[str, Any]] = {
    "submitted": SUBMITTED_SCHEMA,
    "job": JOB_SCHEMA,
    "jobs": JOBS_SCHEMA,
    "log_line": LOG_LINE_SCHEMA,
    "log_end": LOG_END_SCHEMA,
    "outputs": OUTPUTS_SCHEMA,
    "cancelled": CANCELLED_SCHEMA,
    "queues": QUEUES_SCHEMA,
    "status": STATUS_SCHEMA,
    "error": ERROR_SCHEMA,
}


# ---------------------------------------------------------------- requests

# A manifest as rbs.wire.manifest.manifest_from_dict reads it: only the command is
# required, and durations and quantities may use their text forms ("1h", "500m", "8Gi").
_TEXT_OR_INT: dict[str, Any] = {"type": ["string", "integer"]}
_MANIFEST_IN: dict[str, Any] = {
    "type": "object",
    "properties": {
        "apiVersion": {"const": "rbs/v1"},
        "name": _null(_STR),
        "command": _list(_STR),
        "input_root": _null(_STR),
        "resources": _obj(
            {"cpu": {"type": ["string", "number"]}, "memory": _TEXT_OR_INT, "gpus": _INT},
            optional=True,
        ),
        "queue": _null(_STR),
        "priority": _null(_INT),
        "time_limit": {"type": ["string", "integer", "null"]},
        "nodes": _null(_INT),
        "elastic": _null(_BOOL),
        "min_nodes": _null(_INT),
        "max_nodes": _null(_INT),
        "max_retries": _null(_INT),
        "requeue": _null(_BOOL),
        "restarts": _null(_INT),
        "checkpoint_dir": _null(_STR),
        "env": {"type": ["object", "array", "null"], "additionalProperties": _STR, "items": _STR},
        "outputs": _null(_list(_STR)),
        "secrets": _null(_list(_STR)),
        "array": _null(_STR),
        "dependencies": {"type": ["array", "string", "null"], "items": _STR},
        "begin_time": _null(_NUM),
        "deadline": _null(_NUM),
        "container": _null(_STR),
        "network": _null(_STR),
        "cpu_cores": _null(_STR),
        "max_iobps": {"type": ["string", "integer", "null"]},
        "preemptible": _null(_BOOL),
        "interactive": _null(_BOOL),
        "pty": _null(_BOOL),
    },
    "required": ["command"],
    "additionalProperties": False,
}
# `rbs job submit`'s flags as typed: a value, a repeated flag's values, or true for a switch.
_FLAG_VALUE: dict[str, Any] = {"type": ["string", "integer", "boolean", "array"], "items": _STR}

# The client's id for one submit call (a UUID; the server takes 1-128 of A-Z a-z 0-9 . _ : -),
# sent again when it retries the call: the server answers a request id it has seen with the
# job it made (optional).
_REQUEST_ID: dict[str, Any] = _STR
SUBMIT_FLAGS_REQUEST_SCHEMA = _document(
    "POST /v1/jobs: a command and `rbs job submit` flags",
    {
        **_obj(
            {
                "command": _list(_STR),
                "flags": _map(_FLAG_VALUE),
                "input_root": _null(_STR),
                "request_id": _REQUEST_ID,
                "secrets": _map(_STR),
            }
        ),
        "required": ["command", "flags", "input_root"],
    },
)
SUBMIT_MANIFEST_REQUEST_SCHEMA = _document(
    "POST /v1/jobs: a manifest and where its fields came from",
    {
        **_obj(
            {
                "manifest": _MANIFEST_IN,
                "provenance": _map(_STR),
                "request_id": _REQUEST_ID,
                "secrets": _map(_STR),
            }
        ),
        "required": ["manifest"],
    },
)
CANCEL_REQUEST_SCHEMA = _document("POST /v1/jobs/cancel", _obj({"ids": _list(_STR)}))
CAS_MISSING_REQUEST_SCHEMA = _document("POST /v1/cas/missing", _obj({"digests": _list(_STR)}))
CAS_BATCH_HEAD_SCHEMA = _document(
    "POST /v1/cas/batch: the first line (the digests; their bytes follow it)", _list(_STR)
)
_SWITCH: dict[str, Any] = {"type": "string", "enum": ["1", "true"]}
LIST_QUERY_SCHEMA = _document(
    "GET /v1/jobs: the query (state is a comma-separated list of state names)",
    _obj(
        {
            "state": _STR,
            "queue": _STR,
            "history": _SWITCH,
            "user": _STR,
            "name": _STR,
            "array": {"type": "string", "enum": ["1", "true", "0", "false"]},
            "parent": _STR,
            "sort": {"type": "string", "enum": ["id", "submit", "state", "priority"]},
            "order": {"type": "string", "enum": ["asc", "desc"]},
            "limit": _STR,
            "cursor": _STR,
        },
        optional=True,
    ),
)
LOGS_QUERY_SCHEMA = _document(
    "GET /v1/jobs/{id}/logs: the query (after and tail are whole numbers)",
    _obj({"after": _STR, "tail": _STR, "follow": _SWITCH}, optional=True),
)
WAIT_QUERY_SCHEMA = _document(
    "GET /v1/jobs/{id}/wait: the query (timeout in seconds)",
    _obj({"timeout": _STR}, optional=True),
)
REQUEST_SCHEMAS: dict[str, dict[str, Any]] = {
    "submit_flags": SUBMIT_FLAGS_REQUEST_SCHEMA,
    "submit_manifest": SUBMIT_MANIFEST_REQUEST_SCHEMA,
    "cancel": CANCEL_REQUEST_SCHEMA,
    "cas_missing": CAS_MISSING_REQUEST_SCHEMA,
    "cas_batch_head": CAS_BATCH_HEAD_SCHEMA,
    "list_query": LIST_QUERY_SCHEMA,
    "logs_query": LOGS_QUERY_SCHEMA,
    "wait_query": WAIT_QUERY_SCHEMA,
}
