"""The client-facing jobs API: JSON over HTTP/1.1 (aiohttp), next to the gRPC server.

Routes (all JSON unless noted; errors are {"error": {"code", "message"}}):

    POST /v1/jobs                       {"manifest", "provenance"} -> {"job_id"}
    GET  /v1/jobs?state=&queue=&history=1                          -> {"jobs": [...]}
    GET  /v1/jobs/{id}                                             -> job
    GET  /v1/jobs/{id}/wait?timeout=S   long poll until the job ends -> job
    GET  /v1/jobs/{id}/logs?after=&tail=&follow=1   NDJSON lines, then {"end": true}
    GET  /v1/jobs/{id}/outputs                                     -> {"outputs": [...]}
    POST /v1/jobs/cancel                {"ids": [...]}              -> {"cancelled": [...]}
    GET  /v1/queues, GET /v1/status
    POST /v1/cas/missing                {"digests": ["fn:hash/size"]} -> {"missing": [...]}
    POST /v1/cas/batch                  a JSON list of digests, a newline, their bytes
    PUT  /v1/cas/blobs/{fn}/{hash}/{size}   one blob, streamed
    GET  /v1/cas/blobs/{fn}/{hash}/{size}   one blob, streamed

Why HTTP and not gRPC: see docs/design/jobs.md (CLI start-up time). Every JSON document
here is built by rbs.wire.jobs_api, which also reads them for the client.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from rbs.cas.errors import BlobNotFound, CasError, DigestMismatch
from rbs.cas.store import BlobStore
from rbs.model import Digest, DigestFunction, JobManifest, JobState
from rbs.scheduler.events import TaskRef
from rbs.scheduler.views import JobView
from rbs.server.job_driver import JobDriver, JobRequestError
from rbs.units import SpecError
from rbs.wire import jobs_api
from rbs.wire.manifest import apply_flags, manifest_from_dict

log = logging.getLogger(__name__)

_HTTP = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 412,
    "INTERNAL": 500,
}
MAX_BODY = 64 << 20


def _error(code: str, message: str) -> web.Response:
    return web.json_response(jobs_api.error_doc(code, message), status=_HTTP.get(code, 500))


def _job_id(text: str) -> TaskRef:
    try:
        return TaskRef.parse(text)
    except SpecError as e:
        raise JobRequestError(str(e)) from None


def _digest(fn: str, h: str, size: str) -> Digest:
    try:
        return Digest(function=DigestFunction.parse(fn), hash=h, size=int(size))
    except ValueError as e:
        raise JobRequestError(str(e)) from None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class JobsApi:
    def __init__(self, driver: JobDriver, store: BlobStore, token: str | None = None) -> None:
        self.driver = driver
        self.store = store
        self.token = token

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._middleware])
        r = app.router
        r.add_post("/v1/jobs", self.submit)
        r.add_get("/v1/jobs", self.list_jobs)
        r.add_post("/v1/jobs/cancel", self.cancel)
        r.add_get("/v1/jobs/{id}", self.show)
        r.add_get("/v1/jobs/{id}/wait", self.wait)
        r.add_get("/v1/jobs/{id}/logs", self.logs)
        r.add_get("/v1/jobs/{id}/outputs", self.outputs)
        r.add_get("/v1/queues", self.queues)
        r.add_get("/v1/status", self.status)
        r.add_post("/v1/cas/missing", self.cas_missing)
        r.add_post("/v1/cas/batch", self.cas_batch)
        r.add_put("/v1/cas/blobs/{fn}/{hash}/{size}", self.cas_put)
        r.add_get("/v1/cas/blobs/{fn}/{hash}/{size}", self.cas_get)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.token is not None:
            got = request.headers.get("Authorization", "")
            if not hmac.compare_digest(got.encode(), f"Bearer {self.token}".encode()):
                log.warning(
                    "refused %s %s from %s: missing or wrong token",
                    request.method,
                    request.path,
                    request.remote,
                )
                return _error(
                    "UNAUTHENTICATED",
                    "missing or wrong token: set RBS_REMOTE_TOKEN "
                    "(or --token-file) to the cluster's token",
                )
        try:
            return await handler(request)
        except JobRequestError as e:
            return _error(e.code, str(e))
        except (SpecError, ValueError) as e:
            return _error("INVALID_ARGUMENT", str(e))
        except BlobNotFound as e:
            return _error("NOT_FOUND", str(e))
        except CasError as e:
            return _error("INVALID_ARGUMENT", str(e))

    async def _json(self, request: web.Request) -> Any:
        try:
            return await request.json()
        except json.JSONDecodeError as e:
            raise JobRequestError(f"request body is not JSON: {e}") from None

    # ---- jobs

    async def submit(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        if not isinstance(body, dict) or not ("manifest" in body or "flags" in body):
            raise JobRequestError(
                'want {"manifest": {...}, "provenance": {...}} or '
                '{"command": [...], "flags": {"--time": "1h", ...}, "input_root": null}'
            )
        if "manifest" in body:
            manifest = manifest_from_dict(body["manifest"])
            prov = body.get("provenance") or {}
            if not isinstance(prov, dict):
                raise JobRequestError("provenance must be an object of field -> source")
        else:
            manifest, prov = self._from_flags(body)
        if manifest.input_root is not None:
            missing = self.store.find_missing([manifest.input_root])
            if missing:
                raise JobRequestError(
                    f"the input tree {manifest.input_root} is not in the "
                    "cluster's CAS; upload it first",
                    "FAILED_PRECONDITION",
                )
        job_id = await self.driver.submit(manifest, {str(k): str(v) for k, v in prov.items()})
        return web.json_response(jobs_api.submitted_doc(job_id))

    @staticmethod
    def _from_flags(body: dict[str, Any]) -> tuple[JobManifest, dict[str, str]]:
        """`rbs job submit` flags as the user typed them, layered into a manifest here, so
        the CLI imports none of this (start-up time); errors name the flag."""
        command, flags, root = body.get("command"), body.get("flags"), body.get("input_root")
        if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
            raise JobRequestError("command must be a list of strings")
        if not isinstance(flags, dict):
            raise JobRequestError("flags must be an object of flag -> value")
        input_root = Digest.parse(root) if isinstance(root, str) else None
        return apply_flags(None, None, flags, command=command or None, input_root=input_root)

    async def list_jobs(self, request: web.Request) -> web.Response:
        q = request.query
        states = {s.strip().upper() for s in q.get("state", "").split(",") if s.strip()}
        for s in states:
            if s not in JobState.__members__:
                raise JobRequestError(
                    f"--state {s}: unknown state; states: {', '.join(JobState.__members__)}"
                )
        history = q.get("history") in ("1", "true")
        queue = q.get("queue")
        out: list[JobView] = []
        for jid, state in self.driver.states():
            if states and state.value not in states:
                continue
            if not states and not history and state.terminal:
                continue
            v = self.driver.view(jid)
            if queue and v.queue != queue:
                continue
            out.append(v)
        return web.json_response(jobs_api.jobs_doc(out))

    async def show(self, request: web.Request) -> web.Response:
        ref = _job_id(request.match_info["id"])
        return web.json_response(jobs_api.job_doc(self.driver.view(ref.job_id)))

    async def wait(self, request: web.Request) -> web.Response:
        ref = _job_id(request.match_info["id"])
        timeout = min(float(request.query.get("timeout", "30")), 300.0)
        deadline = time.monotonic() + timeout
        while not self.driver.state_of(ref.job_id).terminal:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await self.driver.logs.wait(ref.job_id, min(left, 1.0))
        return web.json_response(jobs_api.job_doc(self.driver.view(ref.job_id)))

    async def cancel(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(ids, list) or not ids:
            raise JobRequestError('want {"ids": ["ID", "ID_INDEX", ...]}')
        refs = [_job_id(str(i)) for i in ids]
        for r in refs:
            self.driver.state_of(r.job_id)
        await self.driver.cancel(refs)
        return web.json_response(jobs_api.cancelled_doc(refs))

    async def logs(self, request: web.Request) -> web.StreamResponse:
        ref = _job_id(request.match_info["id"])
        self.driver.state_of(ref.job_id)
        q = request.query
        after = int(q.get("after", "0"))
        tail = int(q["tail"]) if "tail" in q else None
        follow = q.get("follow") in ("1", "true")
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        logs = self.driver.logs
        while True:
            lines = logs.read(ref.job_id, after=after, task=ref.index, tail=tail)
            tail = None
            if lines:
                after = lines[-1].seq
                await resp.write(jobs_api.log_lines_payload(lines))
                continue
            # Workers send a run's lines before its end on the same ordered stream, so
            # once the job is terminal every line it wrote is stored: nothing is cut off.
            if not follow or self.driver.state_of(ref.job_id).terminal:
                break
            await logs.wait(ref.job_id, 1.0)
        await resp.write(jobs_api.log_end_payload(self.driver.state_of(ref.job_id)))
        await resp.write_eof()
        return resp

    async def outputs(self, request: web.Request) -> web.Response:
        ref = _job_id(request.match_info["id"])
        self.driver.state_of(ref.job_id)
        rows = self.driver.outputs.latest(ref.job_id)
        if ref.index is not None:
            rows = [r for r in rows if r["task"] == ref.index]
        return web.json_response(jobs_api.outputs_doc(rows))

    async def queues(self, request: web.Request) -> web.Response:
        return web.json_response(jobs_api.queues_doc(self.driver.sched.queues()))

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(jobs_api.status_doc(self.driver.hub.status()))

    # ---- CAS for staging inputs and fetching outputs

    async def cas_missing(self, request: web.Request) -> web.Response:
        body = await self._json(request)
        texts = body.get("digests") if isinstance(body, dict) else None
        if not isinstance(texts, list):
            raise JobRequestError('want {"digests": ["blake3:HASH/SIZE", ...]}')
        digests = [Digest.parse(str(t)) for t in texts]
        missing = await asyncio.to_thread(self.store.find_missing, digests)
        return web.json_response({"missing": [str(d) for d in missing]})

    async def cas_batch(self, request: web.Request) -> web.Response:
        data = await request.read()
        head, sep, rest = data.partition(b"\n")
        if not sep:
            raise JobRequestError("batch body: want a JSON list of digests, a newline, the bytes")
        digests = [Digest.parse(str(t)) for t in json.loads(head)]
        if sum(d.size for d in digests) != len(rest):
            raise JobRequestError(
                f"batch body holds {len(rest)} bytes, the digests name "
                f"{sum(d.size for d in digests)}"
            )

        def put_all() -> None:
            off = 0
            for d in digests:
                self.store.put(rest[off : off + d.size], expected=d)
                off += d.size

        try:
            await asyncio.to_thread(put_all)
        except DigestMismatch as e:
            raise JobRequestError(str(e)) from None
        return web.json_response({"stored": len(digests)})

    async def cas_put(self, request: web.Request) -> web.Response:
        mi = request.match_info
        d = _digest(mi["fn"], mi["hash"], mi["size"])
        if self.store.contains(d):
            await request.read() if d.size < (1 << 20) else None
            return web.json_response({"stored": 0})
        w = self.store.writer(d)
        try:
            async for chunk in request.content.iter_chunked(1 << 20):
                await asyncio.to_thread(w.write, chunk)
            await asyncio.to_thread(w.commit)
        except BaseException:
            w.abort()
            raise
        return web.json_response({"stored": 1})

    async def cas_get(self, request: web.Request) -> web.StreamResponse:
        mi = request.match_info
        d = _digest(mi["fn"], mi["hash"], mi["size"])
        self.store.require(d)
        resp = web.StreamResponse(
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(d.size)}
        )
        await resp.prepare(request)
        f = self.store.open(d)
        try:
            while chunk := await asyncio.to_thread(f.read, 1 << 20):
                await resp.write(chunk)
        finally:
            f.close()
        await resp.write_eof()
        return resp


async def start_http(api: JobsApi, host: str, port: int) -> web.AppRunner:
    """Serve the jobs API on host:port; raises OSError when the port is taken."""
    runner = web.AppRunner(api.app(), access_log=None)
    await runner.setup()
    # SO_REUSEADDR lets a restarted server bind while the old one's connections sit in
    # TIME_WAIT; on Linux it never lets two servers listen on one port (that is REUSEPORT).
    site = web.TCPSite(runner, host, port, reuse_address=True, reuse_port=False)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
