"""Fixed walks through the jobs API: every route's JSON response, and every request the client sends.

`run_scenario` talks raw HTTP (http.client), not `rbs.client.jobs`, so that what it
records is the server's own bytes, parsed as JSON and nothing else. Its record, taken
once from the server before the JSON code moved to rbs.wire.jobs_api, is
tests/helpers/jobs_api_responses.json.

`run_client_scenario` is the other direction: `rbs.client.jobs.JobsClient` calls every
route, and the server records each request as it arrived (method, path and query as
sent, body bytes). Its record, taken before the request documents moved to rbs.wire, is
tests/helpers/jobs_api_requests.json.

Rewrite a record only when the API is meant to change:
`PYTHONPATH=tests/helpers .venv/bin/python tests/integration/server/jobs/jobs_api_scenario.py
[responses|requests]`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web
from jobs_api_docs import REQUESTS_FIXTURE, Doc
from jobs_harness import JobCluster

import rbs.server.cluster
from rbs.client.http import HttpConnection
from rbs.client.jobs import JobsClient
from rbs.client.staging import stage_inputs
from rbs.model import JobManifest, Resources
from rbs.scheduler.config import QueueConfig, SchedulerConfig
from rbs.server.config import Config
from rbs.server.jobs_http import JobsApi

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


@contextlib.contextmanager
def recorded_requests() -> Iterator[list[Doc]]:
    """While active, a cluster started by JobCluster records every jobs API request it
    receives, in order: method, path with the query as sent, and a POST's body text (a
    PUT's body is streamed to the store, so only its length is kept)."""
    seen: list[Doc] = []

    @web.middleware
    async def record(
        request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        entry: Doc = {"method": request.method, "path": request.raw_path}
        if request.method == "POST":
            entry["body"] = (await request.read()).decode("utf-8", "backslashreplace")
        elif request.can_read_body:
            entry["length"] = request.content_length
        seen.append(entry)
        response: web.StreamResponse = await handler(request)
        return response

    real_start = rbs.server.cluster.start_http

    async def start_http(
        api: JobsApi, host: str, port: int, config: Config | None = None
    ) -> web.AppRunner:
        make_app = api.app

        def app() -> web.Application:
            application = make_app()
            application.middlewares.append(record)
            return application

        setattr(api, "app", app)  # noqa: B010 (shadows the method on this instance only)
        return await real_start(api, host, port, config)

    rbs.server.cluster.start_http = start_http  # type: ignore[assignment]
    try:
        yield seen
    finally:
        rbs.server.cluster.start_http = real_start  # type: ignore[assignment]


def run_client_scenario(cluster: JobCluster, tmp: Path, seen: list[Doc]) -> list[Doc]:
    """Call every jobs API route through JobsClient; the requests the server received."""
    work = tmp / "w1"
    work.mkdir(parents=True)
    (work / "worker-id").write_text("w1\n")
    cluster.add_worker(work, name="w1", job_slots=4, cpus=4, memory_gb=4)
    del seen[:]  # only the client's requests count
    client = JobsClient(cluster.address, token=None, announce=False)
    inputs = tmp / "inputs"
    (inputs / "sub").mkdir(parents=True)
    (inputs / "data.txt").write_text("some input\n")
    (inputs / "sub" / "more.txt").write_text("more input\n")
    try:
        plain = client.submit(
            ["sh", "-c", "mkdir -p out; echo one > out/a.txt; echo one"],
            name="plain",
            cpus="0.5",
            memory_gb="0.25",
            time="10m",
            priority=2,
            env=["A=1", "B=two words"],
            outputs=["out/"],
            no_requeue=True,
            max_retries=1,
        )
        staged = client.submit(
            ["cat", "data.txt", "sub/more.txt"], inputs=["data.txt", "sub"], cwd=inputs
        )
        base = JobManifest(
            name="base",
            command=("sh", "-c", "echo base"),
            resources=Resources(cpu_millis=250, memory_bytes=64 << 20),
            env=(("FOO", "bar"),),
        )
        layered = client.submit(
            None, manifest=base, provenance={"*": "target //pkg:base"}, time="5m", queue="gpu"
        )
        direct = client.submit_manifest(base, {"name": "target //pkg:base"})
        arr = client.submit(
            ["sh", "-c", "echo task $RBS_TASK_ID"], array="0-1", deps=f"afterok:{plain}"
        )
        sleeper = client.submit(["sleep", "600"], name="sleeper")
        for job in (plain, staged, layered, direct, arr):
            client.wait(job)
        client.show(plain)
        client.show(f"{arr}_1")
        client.show(f" {plain}")  # a path component that needs quoting
        client.list_jobs()
        client.list_jobs(states=["COMPLETED", "failed"], queue="batch", history=True)
        client.list_jobs(queue="a b&c=d", history=True)
        list(client.logs(plain))
        list(client.logs(plain, tail=1))
        list(client.logs(arr, follow=True))
        list(client.logs(f"{arr}_1", after=1))
        client.cancel([sleeper])
        client.wait(sleeper)
        client.output_digests(plain)
        client.outputs(plain, tmp / "fetched")
        client.queues()
        client.status()
    finally:
        client.close()
    return list(seen)


def _record(kind: str) -> None:
    from jobs_api_docs import FIXTURE

    with tempfile.TemporaryDirectory() as tmp:
        with recorded_requests() as seen:
            cluster = JobCluster(Path(tmp) / "server", jobs=SCENARIO_JOBS)
        try:
            record: Any
            if kind == "requests":
                record, target = run_client_scenario(cluster, Path(tmp), seen), REQUESTS_FIXTURE
            else:
                record, target = run_scenario(cluster, Path(tmp)), FIXTURE
        finally:
            cluster.stop()
    target.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(record)} {kind} to {target}", file=sys.stderr)


if __name__ == "__main__":
    _record(sys.argv[1] if len(sys.argv) > 1 else "responses")
