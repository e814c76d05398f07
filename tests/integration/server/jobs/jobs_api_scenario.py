"""A fixed walk through every jobs API route, recording each JSON response as the server sent it.

The walk talks raw HTTP (http.client), not `rbs.client.jobs`, so that what it records is
the server's own bytes, parsed as JSON and nothing else. Its record, taken once from the
server before the JSON code moved to rbs.wire.jobs_api, is
tests/helpers/jobs_api_responses.json. Rewrite it only when the API is meant to change:
`PYTHONPATH=tests/helpers .venv/bin/python tests/integration/server/jobs/jobs_api_scenario.py`.
"""

from __future__ import annotations

import http.client
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobs_api_docs import Doc
from jobs_harness import JobCluster

from rbs.client.http import HttpConnection
from rbs.client.staging import stage_inputs
from rbs.scheduler.config import QueueConfig, SchedulerConfig

# A grid step far longer than any test: the age bonus cannot tick during the walk.
SCENARIO_JOBS = SchedulerConfig(
    heartbeat_timeout=3.0,
    validate=True,
    age_interval=1e9,
    queues=(
        QueueConfig(name="batch"),
        QueueConfig(name="gpu", priority_weight=10, default_time_limit=3600, max_time_limit=86400),
    ),
)


class Raw:
    """Plain HTTP requests to the jobs API: status code and parsed JSON body."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Doc:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        resp = self.conn.getresponse()
        payload = resp.read()
        if resp.headers.get("Content-Type", "").startswith("application/x-ndjson"):
            lines = [json.loads(ln) for ln in payload.splitlines() if ln.strip()]
            return {"status": resp.status, "ndjson": lines}
        return {"status": resp.status, "json": json.loads(payload)}

    def close(self) -> None:
        self.conn.close()


def _until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def run_scenario(cluster: JobCluster, tmp: Path) -> dict[str, Doc]:
    """Submit a fixed set of jobs and record every route's answer, keyed by a route name."""
    work = tmp / "w1"
    work.mkdir(parents=True)
    (work / "worker-id").write_text("w1\n")
    cluster.add_worker(work, name="w1", job_slots=4, cpus=4, memory_gb=4)
    http_port = cluster.port + 1
    api = Raw(http_port)
    out: dict[str, Doc] = {}

    def rec(key: str, method: str, path: str, body: Any = None, raw: bytes | None = None) -> Doc:
        doc = api.call(method, path, body, raw)
        out[key] = doc
        return doc["json"] if "json" in doc else doc["ndjson"]

    def state(job: str) -> str:
        return str(api.call("GET", f"/v1/jobs/{job}")["json"]["state"])

    def terminal(job: str) -> None:
        _until(
            f"job {job} to end",
            lambda: state(job) not in ("PENDING", "RUNNING"),
        )

    def flags(command: list[str], **given: str) -> dict[str, Any]:
        return {
            "command": command,
            "flags": {"--" + k.replace("_", "-"): v for k, v in given.items()},
            "input_root": None,
        }

    # -- submissions
    hello = rec(
        "submit.flags",
        "POST",
        "/v1/jobs",
        flags(["sh", "-c", "echo out-line; echo err-line >&2"], name="hello"),
    )["job_id"]
    fails = rec(
        "submit.flags_queue",
        "POST",
        "/v1/jobs",
        flags(["sh", "-c", "exit 3"], name="fails", queue="gpu", priority="5"),
    )["job_id"]
    arr = rec(
        "submit.array",
        "POST",
        "/v1/jobs",
        flags(["sh", "-c", "echo task $RBS_TASK_ID"], name="arr", array="0-2%2"),
    )["job_id"]
    inputs = tmp / "inputs"
    inputs.mkdir()
    (inputs / "data.txt").write_text("some input\n")
    root = stage_inputs(HttpConnection("127.0.0.1", http_port), ["data.txt"], inputs).root
    manifest = {
        "apiVersion": "rbs/v1",
        "name": "full",
        "command": ["sh", "-c", "mkdir -p out; cat data.txt > out/a.txt; echo $FOO"],
        "input_root": str(root),
        "resources": {"cpu": "500m", "memory": "64Mi", "gpus": 0},
        "queue": "batch",
        "priority": 3,
        "time_limit": "1h",
        "max_retries": 1,
        "requeue": False,
        "env": {"FOO": "bar"},
        "outputs": ["out/"],
    }
    full = rec(
        "submit.manifest",
        "POST",
        "/v1/jobs",
        {"manifest": manifest, "provenance": {"name": "target //pkg:full"}},
    )["job_id"]
    # Eligible only in 2100: PENDING (BeginTime) for the whole walk.
    later = {"command": ["true"], "name": "waits", "begin_time": 4102444800.0}
    waits = rec("submit.waits", "POST", "/v1/jobs", {"manifest": later})["job_id"]
    sleeper = rec("submit.sleeper", "POST", "/v1/jobs", flags(["sleep", "600"], name="sleeper"))[
        "job_id"
    ]
    for job in (hello, fails, arr, full):
        terminal(job)
    after = rec(
        "submit.deps",
        "POST",
        "/v1/jobs",
        flags(["true"], name="after", deps=f"afterok:{hello},afterany:{fails}"),
    )["job_id"]
    terminal(after)
    _until("the sleeper to run", lambda: state(sleeper) == "RUNNING")
    rec("show.running", "GET", f"/v1/jobs/{sleeper}")
    rec("list.default", "GET", "/v1/jobs")
    rec("queues.busy", "GET", "/v1/queues")
    rec("cancel", "POST", "/v1/jobs/cancel", {"ids": [sleeper]})
    terminal(sleeper)

    # -- reading
    for key, job in (
        ("hello", hello),
        ("fails", fails),
        ("arr", arr),
        ("full", full),
        ("waits", waits),
        ("after", after),
        ("sleeper", sleeper),
    ):
        rec(f"show.{key}", "GET", f"/v1/jobs/{job}")
    rec("show.task", "GET", f"/v1/jobs/{arr}_1")
    rec("wait.done", "GET", f"/v1/jobs/{hello}/wait?timeout=5")
    rec("wait.timeout", "GET", f"/v1/jobs/{waits}/wait?timeout=0.05")
    rec("list.pending", "GET", "/v1/jobs")
    rec("list.history", "GET", "/v1/jobs?history=1")
    rec("list.state", "GET", "/v1/jobs?state=COMPLETED,failed")
    rec("list.queue", "GET", "/v1/jobs?queue=gpu&history=1")
    rec("logs.hello", "GET", f"/v1/jobs/{hello}/logs")
    rec("logs.after", "GET", f"/v1/jobs/{hello}/logs?after=2")
    rec("logs.tail", "GET", f"/v1/jobs/{hello}/logs?tail=1")
    rec("logs.follow", "GET", f"/v1/jobs/{full}/logs?follow=1")
    rec("logs.array", "GET", f"/v1/jobs/{arr}/logs")
    rec("logs.task", "GET", f"/v1/jobs/{arr}_1/logs")
    rec("outputs.full", "GET", f"/v1/jobs/{full}/outputs")
    rec("outputs.none", "GET", f"/v1/jobs/{hello}/outputs")
    rec("queues", "GET", "/v1/queues")
    # Every worker reported its last heartbeat; the job counts are final.
    rec("status", "GET", "/v1/status")

    # -- errors
    rec("error.unknown_job", "GET", "/v1/jobs/999")
    rec("error.bad_job_id", "GET", "/v1/jobs/abc")
    rec("error.bad_state", "GET", "/v1/jobs?state=BOGUS")
    rec("error.bad_body", "POST", "/v1/jobs", {"foo": 1})
    rec("error.not_json", "POST", "/v1/jobs", raw=b"{not json")
    rec("error.bad_flag", "POST", "/v1/jobs", flags(["true"], time="soon"))
    rec("error.unknown_flag", "POST", "/v1/jobs", flags(["true"], bogus="1"))
    rec("error.bad_manifest", "POST", "/v1/jobs", {"manifest": {"command": []}})
    missing = "blake3:" + "ab" * 32 + "/10"
    rec(
        "error.missing_inputs",
        "POST",
        "/v1/jobs",
        {"manifest": {"command": ["true"], "input_root": missing}},
    )
    rec("error.too_big", "POST", "/v1/jobs", flags(["true"], gpus="2"))
    rec("error.cancel_body", "POST", "/v1/jobs/cancel", {})
    rec("error.cancel_unknown", "POST", "/v1/jobs/cancel", {"ids": ["999"]})
    rec("error.logs_unknown", "GET", "/v1/jobs/999/logs")
    api.close()
    return out


if __name__ == "__main__":
    from jobs_api_docs import FIXTURE

    with tempfile.TemporaryDirectory() as tmp:
        cluster = JobCluster(Path(tmp) / "server", jobs=SCENARIO_JOBS)
        try:
            record = run_scenario(cluster, Path(tmp))
        finally:
            cluster.stop()
    FIXTURE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(record)} responses to {FIXTURE}", file=sys.stderr)
