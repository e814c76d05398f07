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
(JobInfo is a slotted class rather than a dataclass for the same reason; job states and
log lines come from rbs.model only where a call needs them.)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence

from rbs.client.errors import JobError
from rbs.client.http import HttpConnection, HttpError

# Not imported from typing, which costs `rbs job submit` start-up for nothing at run
# time; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from rbs.client.staging import StageResult
    from rbs.model import JobManifest, LogLine


class JobInfo:
    """A job as the server reports it; `raw` holds every field of `rbs job show --json`."""

    __slots__ = ("exit_code", "job_id", "name", "queue", "raw", "reason", "state")

    def __init__(
        self,
        *,
        job_id: str,
        name: str,
        state: str,
        reason: str | None,
        queue: str,
        exit_code: int | None,
        raw: Mapping[str, Any],
    ) -> None:
        self.job_id = job_id
        self.name = name
        self.state = state
        self.reason = reason
        self.queue = queue
        self.exit_code = exit_code
        self.raw = raw

    def __repr__(self) -> str:
        return f"JobInfo(job_id={self.job_id!r}, name={self.name!r}, state={self.state!r})"

    @property
    def done(self) -> bool:
        from rbs.model import TERMINAL_STATES

        return self.state in {s.value for s in TERMINAL_STATES}

    @property
    def ok(self) -> bool:
        from rbs.model import JobState

        return self.state == JobState.COMPLETED.value

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobInfo:
        return cls(
            job_id=str(data["job_id"]),
            name=str(data.get("name", "")),
            state=str(data["state"]),
            reason=data.get("reason"),
            queue=str(data.get("queue", "")),
            exit_code=data.get("exit_code"),
            raw=data,
        )


def log_line_json(line: LogLine) -> str:
    """A line as `rbs job logs --json` prints it (`task` only for an array job)."""
    d: dict[str, Any] = {
        "seq": line.seq,
        "time": line.time,
        "stream": line.stream.value,
        "text": line.text,
    }
    if line.task is not None:
        d["task"] = line.task
    d["attempt"] = line.attempt
    return json.dumps(d, ensure_ascii=False)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise JobError(f"--server {text!r}: want HOST:PORT, e.g. 127.0.0.1:8980")
    return host.strip("[]"), int(port)


class JobsClient:
    """A connection to one cluster's jobs API."""

    def __init__(
        self,
        server: str | None = None,
        *,
        token: str | None = None,
        home: Path | None = None,
        announce: bool = True,
    ) -> None:
        server = server or os.environ.get("RBS_REMOTE") or None
        token = token if token is not None else os.environ.get("RBS_REMOTE_TOKEN") or None
        if server:
            host, grpc_port = parse_address(server)
            self.server = server
        else:
            from rbs.client.local import ensure_local

            cluster = ensure_local(home, announce=announce)
            host, grpc_port = cluster.host, cluster.grpc_port
            self.server = cluster.address
        self.conn = HttpConnection(host, grpc_port + 1, token=token)

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

    # ---- submitting

    def submit(
        self,
        command: Sequence[str] | None = None,
        *,
        manifest: JobManifest | None = None,
        provenance: Mapping[str, str] | None = None,
        inputs: Sequence[str] = (),
        cwd: Path | None = None,
        **flags: Any,
    ) -> str:
        """Submit a job and return its id.

        Flags use `rbs job submit`'s names with underscores: name, queue, priority, cpus,
        memory_gb, gpus, time, deps, array, env (list of KEY=VALUE), outputs, no_requeue,
        nodes, max_retries, checkpoint_dir. `manifest` (from a job target) is the base the
        flags override. `inputs` are staged through the CAS first.
        """
        root = None
        if inputs:
            root = self.stage(inputs, cwd=cwd).root
        cli_flags = {"--" + k.replace("_", "-"): v for k, v in flags.items()}
        if manifest is not None:
            from rbs.wire.manifest import apply_flags

            m, prov = apply_flags(manifest, provenance, cli_flags, command=command, input_root=root)
            return self.submit_manifest(m, prov)
        # The server layers the flags (apply_flags) and answers a bad value naming its flag.
        body = {
            "command": list(command or ()),
            "flags": cli_flags,
            "input_root": None if root is None else str(root),
        }
        return str(self._call("POST", "/v1/jobs", body)["job_id"])

    def submit_manifest(
        self, manifest: JobManifest, provenance: Mapping[str, str] | None = None
    ) -> str:
        from rbs.wire.manifest import manifest_to_dict

        body = {"manifest": manifest_to_dict(manifest), "provenance": dict(provenance or {})}
        return str(self._call("POST", "/v1/jobs", body)["job_id"])

    def stage(self, inputs: Sequence[str], *, cwd: Path | None = None) -> StageResult:
        from pathlib import Path

        from rbs.client.staging import stage_inputs

        try:
            return stage_inputs(self.conn, inputs, cwd or Path.cwd())
        except HttpError as e:
            raise JobError(e.message) from None

    # ---- reading

    def show(self, job_id: str) -> JobInfo:
        return JobInfo.from_json(self._call("GET", f"/v1/jobs/{_q(job_id)}"))

    def list_jobs(
        self, *, states: Sequence[str] = (), queue: str | None = None, history: bool = False
    ) -> list[JobInfo]:
        q: dict[str, str] = {}
        if states:
            q["state"] = ",".join(states)
        if queue:
            q["queue"] = queue
        if history:
            q["history"] = "1"
        path = "/v1/jobs" + ("?" + _query(q) if q else "")
        return [JobInfo.from_json(j) for j in self._call("GET", path)["jobs"]]

    def queues(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/queues")["queues"])

    def status(self) -> dict[str, Any]:
        return dict(self._call("GET", "/v1/status"))

    def logs(
        self, job_id: str, *, follow: bool = False, tail: int | None = None, after: int = 0
    ) -> Iterator[LogLine]:
        """Log lines in order; with `follow`, keeps streaming until the job ends. A broken
        connection is resumed from the last line seen, so no line is lost or repeated."""
        from rbs.model import LogLine, LogStream

        last = after
        while True:
            q = {"after": str(last)}
            if follow:
                q["follow"] = "1"
            if tail is not None:
                q["tail"] = str(tail)
                tail = None
            path = f"/v1/jobs/{_q(job_id)}/logs?" + _query(q)
            try:
                for raw in self.conn.stream_lines(path):
                    if not raw.strip():
                        continue
                    d = json.loads(raw)
                    if d.get("end"):
                        # Read on to the body's end, so the kept-alive connection is reusable.
                        continue
                    line = LogLine(
                        seq=d["seq"],
                        time=d["time"],
                        stream=LogStream(d["stream"]),
                        text=d["text"],
                        task=d.get("task"),
                        attempt=d.get("attempt", 1),
                        rank=d.get("rank", 0),
                    )
                    last = line.seq
                    yield line
                return
            except HttpError as e:
                raise JobError(e.message) from None
            except (ConnectionError, OSError):
                if not follow:
                    raise
                self.conn.close()
                time.sleep(0.2)  # the server restarts; resume from `last`

    def wait(self, job_id: str, *, timeout: float | None = None) -> JobInfo:
        """Block until the job (all its tasks) ended; returns its final info."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 30.0 if deadline is None else max(0.0, min(30.0, deadline - time.monotonic()))
            info = JobInfo.from_json(
                self._call("GET", f"/v1/jobs/{_q(job_id)}/wait?timeout={left:.3f}")
            )
            if info.done or (deadline is not None and time.monotonic() >= deadline):
                return info

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        return list(self._call("POST", "/v1/jobs/cancel", {"ids": list(job_ids)})["cancelled"])

    def output_digests(self, job_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/v1/jobs/{_q(job_id)}/outputs")["outputs"])

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


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")


def _q(text: str) -> str:
    """Percent-encode one URL component (urllib.parse costs ~4 ms to import)."""
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def _query(q: Mapping[str, str]) -> str:
    return "&".join(f"{_q(k)}={_q(v)}" for k, v in q.items())
