"""The client-facing jobs API: JSON over HTTP/1.1 (aiohttp), next to the gRPC server.

Routes (all JSON unless noted; errors are {"error": {"code", "message"}}):

    POST /v1/jobs                       {"command", "flags", "input_root"} -> {"job_id"}
                                        or {"manifest", "provenance"}      -> {"job_id"}
    GET  /v1/jobs?state=&queue=&history=1&user=&name=&array=&sort=&order=&limit=&cursor=
                                        one page -> {"jobs": [...], "total", "next_cursor"}
    GET  /v1/jobs/{id}                                             -> job
    GET  /v1/jobs/{id}/wait?timeout=S   long poll until the job ends -> job
    GET  /v1/jobs/{id}/logs?after=&tail=&follow=1   NDJSON lines, then {"end": true}
    GET  /v1/jobs/{id}/outputs                                     -> {"outputs": [...]}
    GET  /v1/jobs/{id}/telemetry?since=S&points=N&last=1  -> {"samples": [...]}
    POST /v1/jobs/cancel                {"ids": [...]}              -> {"cancelled": [...]}
    POST /v1/jobs/{id}/update           {"flags": {"--priority": 3}} -> job (a pending one)
    GET  /v1/queues, GET /v1/status
    POST /v1/cas/missing                {"digests": ["fn:hash/size"]} -> {"missing": [...]}
    POST /v1/cas/batch                  a JSON list of digests, a newline, their bytes
    PUT  /v1/cas/blobs/{fn}/{hash}/{size}   one blob, streamed
    GET  /v1/cas/blobs/{fn}/{hash}/{size}   one blob, streamed

Why HTTP and not gRPC: see docs/design/jobs.md (CLI start-up time). Every job document
here is built by rbs.wire.jobs_api, which also reads them for the client; every request
body, path parameter and query is read by rbs.wire.jobs_api_requests, which also builds
them for the client; errors map to statuses in rbs.wire.errors (`http_error`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from rbs.cas.store import BlobStore
from rbs.scheduler.events import TaskRef
from rbs.server.config import Config
from rbs.server.http_guard import HttpGuard
from rbs.server.job_driver import JobDriver, JobRequestError
from rbs.server.job_listing import JobListing
from rbs.server.metrics import ServerMetrics
from rbs.server.reservations import Reservations
from rbs.server.secrets import JobSecrets, check_values
from rbs.server.tls import check_pair, http_context
from rbs.server.tokens import ServerAuth
from rbs.wire import jobs_api
from rbs.wire import jobs_api_requests as req
from rbs.wire.auth import (
    CLAIMED_USER_HEADER,
    Principal,
    Refused,
    Role,
    bearer_token,
    http_refusal,
    owner_refusal,
)
from rbs.wire.errors import (
    FailedPrecondition,
    PermissionDenied,
    Unauthenticated,
    http_error,
    register_http_error,
)

log = logging.getLogger(__name__)

MAX_BODY = 64 << 20
SHOWN_ATTEMPTS = 200  # attempts a job's show and wait list (a large array has many more)

# The job driver's refusals name their own code (INVALID_ARGUMENT, NOT_FOUND, INTERNAL).
register_http_error(JobRequestError)


def _task(text: str) -> TaskRef:
    job_id, index = req.job_ref(text)
    return TaskRef(job_id=job_id, index=index)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Routes(Protocol):
    """Pages served on this port with their own login (rbs.server.dashboard.Dashboard)."""

    def owns(self, path: str) -> bool: ...

    def add_routes(self, app: web.Application) -> None: ...


# Who made the request, as the middleware authenticated it.
PRINCIPAL = web.RequestKey("principal", Principal)


class JobsApi:
    def __init__(
        self,
        driver: JobDriver,
        store: BlobStore,
        auth: ServerAuth,
        secrets: JobSecrets | None = None,
    ) -> None:
        self.driver = driver
        self.secrets = secrets  # None: a submit that names secrets is refused
        self.store = store
        # The connection caps, timeouts and body limits (rbs.server.http_guard); the
        # server's own come from its [http] table (rbs.server.cluster).
        self.guard = HttpGuard()
        self.auth = auth
        self.listing = JobListing(driver)
        self.reservations: Reservations | None = None  # set by rbs.server.cluster
        self.metrics: ServerMetrics | None = None  # GET /metrics (set by rbs.server.cluster)
        # The web dashboard (rbs.server.dashboard; set by rbs.server.cluster).
        self.dashboard: Routes | None = None

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=MAX_BODY, middlewares=[self.guard.middleware, self._middleware]
        )
        r = app.router
        r.add_post("/v1/jobs", self.submit)
        r.add_get("/v1/jobs", self.list_jobs)
        r.add_post("/v1/jobs/cancel", self.cancel)
        r.add_post("/v1/jobs/{id}/update", self.update)
        r.add_get("/v1/jobs/{id}", self.show)
        r.add_get("/v1/jobs/{id}/wait", self.wait)
        r.add_get("/v1/jobs/{id}/logs", self.logs)
        r.add_get("/v1/jobs/{id}/outputs", self.outputs)
        r.add_get("/v1/jobs/{id}/telemetry", self.telemetry)
        r.add_get("/v1/jobs/{id}/attach", self.attach)  # a websocket: rbs.server.job_attach
        r.add_get("/v1/queues", self.queues)
        r.add_get("/v1/status", self.status)
        r.add_post("/v1/cas/missing", self.cas_missing)
        r.add_post("/v1/cas/batch", self.cas_batch)
        r.add_put("/v1/cas/blobs/{fn}/{hash}/{size}", self.cas_put)
        r.add_get("/v1/cas/blobs/{fn}/{hash}/{size}", self.cas_get)
        if self.reservations is not None:
            self.reservations.add_routes(app, PRINCIPAL)
        if self.metrics is not None:
            self.metrics.add_routes(app)
        if self.dashboard is not None:
            self.dashboard.add_routes(app)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.dashboard is not None and self.dashboard.owns(request.path):
            return await handler(request)  # its own login and session cookie
        try:
            self._authorize(request)
            return await handler(request)
        except Exception as e:
            answer = _error(e)
            if answer is None:
                raise  # not a domain error: aiohttp answers 500 and logs it
            return answer

    def _authorize(self, request: web.Request) -> None:
        """The caller (`request[PRINCIPAL]`), allowed this route by its roles
        (rbs.wire.auth.http_refusal); a run's token reads only its child jobs."""
        what = f"{request.method} {request.path}"
        try:
            token = bearer_token(request.headers.get("Authorization"))
            p = self.auth.authenticate(token, request.headers.get(CLAIMED_USER_HEADER))
        except Refused as e:
            self.auth.refusals.refused(what, request.remote, str(e))
            raise Unauthenticated(
                f"{e}: set RBS_REMOTE_TOKEN (or --token-file) to your token"
            ) from None
        reason = http_refusal(p, request.method, request.path)
        if reason is None and p.roles == {Role.RUN} and "id" in request.match_info:
            job_id = _task(request.match_info["id"]).job_id
            v = self.driver.view(job_id)
            reason = owner_refusal(p, job_id, v.user, v.parent)
        if reason is not None:
            self.auth.refusals.refused(what, request.remote, reason)
            raise PermissionDenied(reason)
        request[PRINCIPAL] = p

    async def _json(self, request: web.Request) -> Any:
        # Bounded in size (413), time (408) and depth (400): rbs.server.http_guard.
        return await self.guard.read_json(request)

    # ---- jobs

    async def submit(self, request: web.Request) -> web.Response:
        # A flags body is layered into a manifest here (rbs.wire.manifest.apply_flags), so
        # the CLI imports none of that code (start-up time); errors name the flag.
        body = await self._json(request)
        manifest, prov = req.submit_request(body)
        request_id = req.submit_request_id(body)
        if manifest.input_root is not None:
            missing = self.store.find_missing([manifest.input_root])
            if missing:
                raise FailedPrecondition(
                    f"the input tree {manifest.input_root} is not in the "
                    "cluster's CAS; upload it first"
                )
        p = request[PRINCIPAL]
        parent = p.job_id if p.has(Role.RUN) else None
        values = check_values(manifest, body.get("secrets"))
        if self.secrets is None:
            if values:
                raise FailedPrecondition("this server keeps no job secrets")
            job_id = await self.driver.submit(manifest, prov, request_id, owner=(p.user, parent))
        else:
            owner = (p.user, parent)
            job_id = await self.secrets.submit(manifest, prov, request_id, owner, values)
        return web.json_response(jobs_api.submitted_doc(job_id))

    async def list_jobs(self, request: web.Request) -> web.Response:
        # One page from the journal's indexes (rbs.server.job_listing), never every job.
        params = req.list_params(request.query)
        return web.json_response(self.listing.page(params, time.time()))

    async def show(self, request: web.Request) -> web.Response:
        ref = _task(request.match_info["id"])
        return web.json_response(self._job_doc(ref.job_id))

    def _job_doc(self, job_id: int) -> dict[str, Any]:
        """A job with its attempts (the first SHOWN_ATTEMPTS of an array's) from the journal."""
        view = self.driver.view(job_id)
        history = self.driver.store.task_history(job_id, limit=SHOWN_ATTEMPTS)
        return jobs_api.job_doc(view, history)

    async def wait(self, request: web.Request) -> web.Response:
        ref = _task(request.match_info["id"])
        timeout = req.wait_timeout(request.query)
        deadline = time.monotonic() + timeout
        while not self.driver.state_of(ref.job_id).terminal:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await self.driver.logs.wait_state(ref.job_id, min(left, 1.0))
        return web.json_response(self._job_doc(ref.job_id))

    async def cancel(self, request: web.Request) -> web.Response:
        pairs = req.cancel_request(await self._json(request))
        refs = [TaskRef(job_id=job_id, index=index) for job_id, index in pairs]
        p = request[PRINCIPAL]
        for r in refs:
            self.driver.state_of(r.job_id)  # NOT_FOUND for an unknown job
            v = self.driver.view(r.job_id)
            reason = owner_refusal(p, r.job_id, v.user, v.parent)
            if reason is not None:
                self.auth.refusals.refused("cancel", request.remote, reason)
                raise PermissionDenied(reason)
        await self.driver.cancel(refs, by=p.user)
        return web.json_response(jobs_api.cancelled_doc(refs))

    async def update(self, request: web.Request) -> web.Response:
        # rbs job update: the owner or an admin; raising a priority or a time limit is
        # the admin's alone (rbs.scheduler.update).
        from rbs.server.job_update import update_job

        job_id = _task(request.match_info["id"]).job_id
        flags = req.update_request(await self._json(request))
        p, v = request[PRINCIPAL], self.driver.view(job_id)
        reason = owner_refusal(p, job_id, v.user, v.parent)
        if reason is not None:
            self.auth.refusals.refused("update", request.remote, reason)
            raise PermissionDenied(reason)
        await update_job(self.driver, job_id, flags, p.user, p.has(Role.ADMIN))
        return web.json_response(jobs_api.job_doc(self.driver.view(job_id)))

    async def logs(self, request: web.Request) -> web.StreamResponse:
        ref = _task(request.match_info["id"])
        self.driver.state_of(ref.job_id)
        after, tail, follow = req.logs_query(request.query)
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        logs = self.driver.logs
        while True:
            # Chunks decoded straight to NDJSON (rbs.server.job_logs), no LogLine per line.
            payload, last = logs.read_payload(ref.job_id, after=after, task=ref.index, tail=tail)
            tail = None
            if last is not None:
                after = last
                await resp.write(payload)
                continue
            # Workers send a run's lines before its end on the same ordered stream, so
            # once the job is terminal every line it wrote is stored: nothing is cut off.
            if not follow or self.driver.state_of(ref.job_id).terminal:
                break
            await logs.wait(ref.job_id, 1.0)
        await resp.write(jobs_api.log_end_payload(self.driver.state_of(ref.job_id)))
        await resp.write_eof()
        return resp

    async def attach(self, request: web.Request) -> web.StreamResponse:
        from rbs.server.job_attach import Attach

        job_id = _task(request.match_info["id"]).job_id
        return await Attach(self.driver).handle(request, request[PRINCIPAL], job_id)

    async def outputs(self, request: web.Request) -> web.Response:
        ref = _task(request.match_info["id"])
        self.driver.state_of(ref.job_id)
        rows = self.driver.outputs.latest(ref.job_id)
        if ref.index is not None:
            rows = [r for r in rows if r["task"] == ref.index]
        return web.json_response(jobs_api.outputs_doc(rows))

    async def telemetry(self, request: web.Request) -> web.Response:
        from rbs.server.telemetry import query_doc

        ref = _task(request.match_info["id"])
        self.driver.state_of(ref.job_id)  # NOT_FOUND for an unknown job
        doc = query_doc(
            self.driver.logs.telemetry, ref.job_id, ref.index, request.query, time.time()
        )
        return web.json_response(doc)

    async def queues(self, request: web.Request) -> web.Response:
        return web.json_response(jobs_api.queues_doc(self.driver.sched.queues()))

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response(jobs_api.status_doc(self.driver.hub.status()))

    # ---- CAS for staging inputs and fetching outputs

    async def cas_missing(self, request: web.Request) -> web.Response:
        digests = req.missing_request(await self._json(request))
        missing = await asyncio.to_thread(self.store.find_missing, digests)
        return web.json_response({"missing": [str(d) for d in missing]})

    async def cas_batch(self, request: web.Request) -> web.Response:
        blobs = req.batch_request(await self.guard.read_body(request, MAX_BODY, total=False))

        def put_all() -> None:
            for d, data in blobs:
                self.store.put(data, expected=d)  # DigestMismatch: the request's fault, 400

        await asyncio.to_thread(put_all)
        return web.json_response({"stored": len(blobs)})

    async def cas_put(self, request: web.Request) -> web.Response:
        mi = request.match_info
        d = req.blob_digest(mi["fn"], mi["hash"], mi["size"])
        if self.store.contains(d):
            await request.read() if d.size < (1 << 20) else None
            return web.json_response({"stored": 0})
        w = self.store.writer(d)
        try:
            while chunk := await self.guard.chunk(request, 1 << 20):
                await asyncio.to_thread(w.write, chunk)
            await asyncio.to_thread(w.commit)
        except BaseException:
            w.abort()
            raise
        return web.json_response({"stored": 1})

    async def cas_get(self, request: web.Request) -> web.StreamResponse:
        mi = request.match_info
        d = req.blob_digest(mi["fn"], mi["hash"], mi["size"])
        # Opening verifies the whole blob (a corrupt one is removed: 404) before the
        # status line goes out; a 200 is only ever sent for bytes known good.
        f = await asyncio.to_thread(self.store.open, d)
        try:
            resp = web.StreamResponse(
                headers={
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(d.size),
                }
            )
            await resp.prepare(request)
            sent = 0
            while chunk := await asyncio.to_thread(f.read, 1 << 20):
                sent += len(chunk)
                await resp.write(chunk)
            if sent != d.size:
                raise OSError(f"blob {d} ended after {sent} of {d.size} bytes while sent")
        except OSError as e:
            # The status is out; the one honest thing left is to cut the connection,
            # so the client sees a short body instead of waiting for the rest.
            log.error("GET %s failed mid-response: %s", d, e)
            if request.transport is not None:
                request.transport.close()
            raise
        finally:
            f.close()
        await resp.write_eof()
        return resp


def _error(exc: Exception) -> web.Response | None:
    """The error document for a domain error, with the status rbs.wire.errors maps it to;
    None for any other exception."""
    mapped = http_error(exc)
    if mapped is None:
        return None
    status, code = mapped
    return web.json_response(jobs_api.error_doc(code, str(exc)), status=status)


async def start_http(
    api: JobsApi, host: str, port: int, config: Config | None = None
) -> web.AppRunner:
    """Serve the jobs API on host:port behind the `[http]` caps and timeouts, over TLS
    when `[server] tls_cert` and `tls_key` are set; raises OSError when the port is taken."""
    ssl_context = None
    if config is not None:
        api.guard = HttpGuard(config.http)
        pair = check_pair(config.server.tls_cert, config.server.tls_key)
        ssl_context = http_context(*pair) if pair else None
    runner = web.AppRunner(
        api.app(), access_log=None, keepalive_timeout=api.guard.config.idle_timeout
    )
    await runner.setup()
    # SO_REUSEADDR lets a restarted server bind while the old one's connections sit in
    # TIME_WAIT; on Linux it never lets two servers listen on one port (that is REUSEPORT).
    site = api.guard.site(runner, host, port, ssl_context)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner
