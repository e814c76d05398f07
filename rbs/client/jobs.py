"""The Python API for rbs jobs: submit, show, list, logs, wait, cancel, outputs, queues.

    from rbs.client.jobs import JobsClient
    client = JobsClient()                      # RBS_REMOTE, else the local cluster
    job = client.submit(["python", "train.py"], cpus=2, time="1h", inputs=["."])
    for line in client.logs(job, follow=True):
        print(line.text)
    info = client.wait(job)                    # JobInfo, terminal
    client.outputs(job, "results/")

The CLI is a thin layer over this class. Every call is one HTTP request on a kept-alive
connection. A plain submit sends the flags as given and the server layers them into
the job's manifest (rbs.wire.manifest.apply_flags), so this module imports nothing
but the standard library on that path: `rbs job submit` starts in a few milliseconds.
The API's requests are built by rbs.wire.jobs_api_requests and its answers read by
rbs.wire.jobs_api, which hold to the same rule (JobInfo, defined there, is a slotted
class rather than a dataclass; job states and log lines come from rbs.model only where
a call needs them). JSON goes through rbs.client.fastjson, not the json package (~6 ms
with re), and each method imports rbs.wire.jobs_api where it reads an answer.
"""

from __future__ import annotations

import os
import time

from rbs.client import fastjson
from rbs.client.errors import JobError
from rbs.client.http import ConnectError, HttpConnection, HttpError
from rbs.wire import jobs_api_requests as req

# Not imported from typing, which costs `rbs job submit` start-up for nothing at run
# time; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from pathlib import Path
    from typing import Any

    from rbs.client.staging import StageResult
    from rbs.model import JobManifest, LogLine
    from rbs.wire.jobs_api import JobInfo as JobInfo  # re-exported: the client's API

# How long `logs(follow=True)` and `wait` keep trying to reach a server that went away
# (restarted, or the local one being started again) before they give up.
RECONNECT_S = 60.0


TLS_CA_ENV = "RBS_REMOTE_TLS_CA"


def __getattr__(name: str) -> object:
    # `from rbs.client.jobs import JobInfo`: rbs.wire.jobs_api (and the json package it
    # imports) is loaded when a caller reads a job, never by a plain submit.
    if name == "JobInfo":
        from rbs.wire.jobs_api import JobInfo

        return JobInfo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `grpc://HOST:PORT` or `grpcs://HOST:PORT` (TLS) as (host, gRPC port)."""
    host, sep, port = text.split("://", 1)[-1].rpartition(":")
    scheme = text.split("://", 1)[0] if "://" in text else "grpc"
    if scheme not in ("grpc", "grpcs") or not sep or not port.isdigit() or not host:
        raise JobError(
            f"--server {text!r}: want HOST:PORT (or grpcs://HOST:PORT for TLS), e.g. 127.0.0.1:8980"
        )
    return host.strip("[]"), int(port)


def jobs_api_name(server: str, host: str, grpc_port: int) -> str:
    """How errors name the jobs API: it is on the gRPC port + 1, so say both."""
    return f"the rbs server {server}: its jobs API at {host}:{grpc_port + 1} (the gRPC port + 1)"


class JobsClient:
    """A connection to one cluster's jobs API."""

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        home: Path | None = None,
        announce: bool = True,
        tls_ca: str | None = None,
    ) -> None:
        server = server or os.environ.get("RBS_REMOTE") or None
        token = token if token is not None else os.environ.get("RBS_REMOTE_TOKEN") or None
        tls_ca = tls_ca or os.environ.get(TLS_CA_ENV) or None
        self._home = home
        self._announce = announce
        self._local = not server
        if server:
            host, grpc_port = parse_address(server)
            self.server = server
        else:
            # A cluster that is up is found with a read of cluster.json and /proc alone;
            # rbs.client.local (pathlib, subprocess, ...) only when it must start one.
            from rbs.client.local_state import running_address

            found = running_address(home)
            if found is None:
                from rbs.client.local import ensure_local

                cluster = ensure_local(home, announce=announce)
                found = cluster.host, cluster.grpc_port
            host, grpc_port = found
            self.server = f"{host}:{grpc_port}"
        # TLS when a CA to trust is given or the address says grpcs:// (system roots).
        tls = None
        if tls_ca or (server or "").startswith("grpcs://"):
            from rbs.client.http import tls_context

            try:
                tls = tls_context(tls_ca)
            except ConnectError as e:
                raise JobError(str(e)) from None
        self.conn = HttpConnection(
            host,
            grpc_port + 1,
            token=token,
            name=jobs_api_name(self.server, host, grpc_port),
            tls=tls,
        )

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> JobsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return self.conn.request(method, path, json_body=body).json()
        except HttpError as e:
            raise JobError(e.message) from None
        except ConnectError as e:
            raise JobError(str(e)) from None

    def _reconnect(self, deadline: float, delay: float) -> float:
        """After a lost connection: wait `delay`, have a dead local server restarted (on
        its port, so the worker and its jobs carry on) and follow the cluster to its
        address. Returns the next delay; past `deadline`, gives up with a JobError."""
        self.conn.close()
        if time.monotonic() >= deadline:
            raise JobError(
                f"lost the connection to the rbs server at {self.server} and could not "
                f"reconnect in {RECONNECT_S:g} s"
            )
        time.sleep(delay)
        if self._local:
            from rbs.client.local import ensure_local

            try:
                cluster = ensure_local(self._home, announce=self._announce)
            except RuntimeError as e:
                raise JobError(str(e)) from None
            if cluster.address != self.server:
                self.server = cluster.address
                token = self.conn.token
                self.conn = HttpConnection(
                    cluster.host,
                    cluster.grpc_port + 1,
                    token=token,
                    name=jobs_api_name(cluster.address, cluster.host, cluster.grpc_port),
                )
        return min(delay * 2, 2.0)

    # ---- submitting

    def submit(
        self,
        command: Sequence[str] | None = None,
        *,
        manifest: JobManifest | None = None,
        provenance: Mapping[str, str] | None = None,
        inputs: Sequence[str] = (),
        cwd: Path | None = None,
        secrets: Mapping[str, str] | None = None,
        **flags: Any,
    ) -> str:
        """Submit a job and return its id.

        Flags use `rbs job submit`'s names with underscores: name, queue, priority, cpus,
        memory_gb, gpus, time, deps, array, env (list of KEY=VALUE), outputs, no_requeue,
        nodes, max_retries, checkpoint_dir, secret (names). `manifest` (from a job target) is
        the base the flags override. `inputs` are staged through the CAS first. `secrets`
        are the values of the secrets the job names (rbs.client.secrets.read_secrets).
        """
        root = None
        if inputs:
            root = self.stage(inputs, cwd=cwd).root
        cli_flags = {"--" + k.replace("_", "-"): v for k, v in flags.items()}
        if manifest is not None:
            from rbs.wire.manifest import apply_flags

            m, prov = apply_flags(manifest, provenance, cli_flags, command=command, input_root=root)
            # Where the job came from (rbs.client.versioned: target, commit, manifest).
            prov |= {k: v for k, v in (provenance or {}).items() if k.startswith("origin.")}
            return self.submit_manifest(m, prov, secrets)
        # The server layers the flags (apply_flags) and answers a bad value naming its flag.
        body = req.submit_flags_body(command, cli_flags, root, req.new_request_id())
        return self._submit(_with_secrets(body, secrets))

    def submit_manifest(
        self,
        manifest: JobManifest,
        provenance: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> str:
        body = req.submit_manifest_body(manifest, provenance, req.new_request_id())
        return self._submit(_with_secrets(body, secrets))

    def _submit(self, body: dict[str, Any]) -> str:
        """POST a submit; on a lost connection, once more with the same request id, which
        the server answers with the job the first try made, if it made one."""
        from rbs.wire import jobs_api

        try:
            answer = self.conn.request("POST", req.JOBS_PATH, json_body=body).json()
        except HttpError as e:
            raise JobError(e.message) from None
        except ConnectError:
            self._reconnect(time.monotonic() + RECONNECT_S, 0.1)
            answer = self._call("POST", req.JOBS_PATH, body)
        return jobs_api.submitted_id(answer)

    def stage(self, inputs: Sequence[str], *, cwd: Path | None = None) -> StageResult:
        from pathlib import Path

        from rbs.client.staging import stage_inputs

        try:
            return stage_inputs(self.conn, inputs, cwd or Path.cwd())
        except HttpError as e:
            raise JobError(e.message) from None

    # ---- reading

    def show(self, job_id: str) -> JobInfo:
        from rbs.wire import jobs_api

        return jobs_api.job_info(self._call("GET", req.job_path(job_id)))

    def list_jobs(
        self, *, states: Sequence[str] = (), queue: str | None = None, history: bool = False
    ) -> list[JobInfo]:
        """Every job that matches, in id order (all pages)."""
        out: list[JobInfo] = []
        cursor = None
        for _ in range(1 << 30):  # bounded by the jobs: each page moves the cursor on
            page, _, cursor = self.list_page(
                states=states, queue=queue, history=history, cursor=cursor
            )
            out += page
            if cursor is None:
                break
        return out

    def list_page(
        self,
        *,
        states: Sequence[str] = (),
        queue: str | None = None,
        history: bool = False,
        user: str | None = None,
        name: str | None = None,
        array: bool | None = None,
        parent: str | None = None,
        sort: str | None = None,
        order: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> tuple[list[JobInfo], int, str | None]:
        """One page of a listing: (its jobs, how many match in all, the next page's cursor
        or None). The arguments are `rbs.wire.jobs_api_requests.jobs_path`'s."""
        from rbs.wire import jobs_api

        path = req.jobs_path(
            states,
            queue,
            history,
            user=user,
            name=name,
            array=array,
            parent=parent,
            sort=sort,
            order=order,
            limit=limit,
            cursor=cursor,
        )
        return jobs_api.job_page(self._call("GET", path))

    def queues(self) -> list[dict[str, Any]]:
        from rbs.wire import jobs_api

        return jobs_api.queue_rows(self._call("GET", req.QUEUES_PATH))

    def status(self) -> dict[str, Any]:
        from rbs.wire import jobs_api

        return jobs_api.status_fields(self._call("GET", req.STATUS_PATH))

    def logs(
        self, job_id: str, *, follow: bool = False, tail: int | None = None, after: int = 0
    ) -> Iterator[LogLine]:
        """Log lines in order; with `follow`, keeps streaming until the job ends. A broken
        connection is resumed from the last line seen, so no line is lost or repeated;
        reconnecting is given up after RECONNECT_S without reaching the server."""
        from rbs.wire import jobs_api

        last = after
        deadline = None  # set while the server cannot be reached
        delay = 0.1
        while True:
            path = req.logs_path(job_id, after=last, follow=follow, tail=tail)
            try:
                for raw in self.conn.stream_lines(path):
                    deadline, delay = None, 0.1  # reached it
                    tail = None
                    if not raw.strip():
                        continue
                    line = jobs_api.log_line(fastjson.loads(raw))
                    if line is None:
                        # The end marker: read on to the body's end, so the kept-alive
                        # connection is reusable.
                        continue
                    last = line.seq
                    yield line
                return
            except HttpError as e:
                raise JobError(e.message) from None
            except (ConnectError, ConnectionError, OSError) as e:
                if not follow:
                    if isinstance(e, ConnectError):
                        raise JobError(str(e)) from None
                    raise
                if deadline is None:
                    deadline = time.monotonic() + RECONNECT_S
                delay = self._reconnect(deadline, delay)  # then resume after `last`

    def wait(self, job_id: str, *, timeout: float | None = None) -> JobInfo:
        """Block until the job (all its tasks) ended; returns its final info."""
        from rbs.wire import jobs_api

        deadline = None if timeout is None else time.monotonic() + timeout
        lost = None  # the reconnect deadline, while the server cannot be reached
        delay = 0.1
        while True:
            left = 30.0 if deadline is None else max(0.0, min(30.0, deadline - time.monotonic()))
            try:
                doc = self.conn.request("GET", req.wait_path(job_id, left)).json()
            except HttpError as e:
                raise JobError(e.message) from None
            except ConnectError:
                if lost is None:
                    lost = time.monotonic() + RECONNECT_S
                delay = self._reconnect(lost, delay)
                continue
            lost, delay = None, 0.1
            info = jobs_api.job_info(doc)
            if info.done or (deadline is not None and time.monotonic() >= deadline):
                return info

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        from rbs.wire import jobs_api

        return jobs_api.cancelled_ids(self._call("POST", req.CANCEL_PATH, req.cancel_body(job_ids)))

    def update(self, job_id: str, flags: Mapping[str, Any]) -> JobInfo:
        """Change a pending job (`rbs job update`): flags keyed "--begin", "--priority",
        "--time", "--queue"; the job as it is now."""
        from rbs.wire import jobs_api

        body = req.update_body(flags)
        return jobs_api.job_info(self._call("POST", req.update_path(job_id), body))

    def telemetry(
        self,
        job_id: str,
        *,
        since: float | None = None,
        points: int | None = None,
        last: bool = False,
    ) -> list[dict[str, Any]]:
        """The job's telemetry samples (rbs.server.telemetry), oldest first."""
        query = {"since": since, "points": points, "last": 1 if last else None}
        args = "&".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in query.items()
            if v is not None
        )
        path = f"{req.job_path(job_id)}/telemetry" + (f"?{args}" if args else "")
        samples = self._call("GET", path).get("samples", [])
        return [s for s in samples if isinstance(s, dict)]

    def output_digests(self, job_id: str) -> list[dict[str, Any]]:
        from rbs.wire import jobs_api

        return jobs_api.output_records(self._call("GET", req.outputs_path(job_id)))

    def outputs(self, job_id: str, dest: Path | str | None = None) -> Path:
        """Download the job's recorded outputs into `dest` (default ./job-ID-outputs/).
        An array job gets one folder per task."""
        from pathlib import Path

        from rbs.client.fetch import fetch_tree
        from rbs.model import Digest

        dest = Path(dest or f"job-{job_id}-outputs")
        records = self.output_digests(job_id)
        if not records:
            raise JobError(
                f"job {job_id} has recorded no outputs (yet); declare them with --outputs"
            )
        many = len(records) > 1
        for rec in records:
            target = dest / f"task-{rec['task']}" if many and rec.get("task") is not None else dest
            fetch_tree(self.conn, Digest.parse(rec["digest"]), target)
        return dest


def _with_secrets(body: dict[str, Any], secrets: Mapping[str, str] | None) -> dict[str, Any]:
    if secrets:
        body["secrets"] = dict(secrets)
    return body
