"""The web dashboard on the jobs API's port: /ui/jobs, /ui/jobs/{id}, /ui/workers, /ui/queues,
/ui/builds (rbs.server.dashboard_builds).

Who may look: a login form takes the same token the CLI uses (rbs.server.tokens); the
server keeps a session for it and sets the `rbs_session` cookie (HttpOnly,
SameSite=Strict, Secure over TLS). A server without tokens (the embedded cluster) has no
login: it serves the dashboard to 127.0.0.1 (and ::1) only, with a session made on the
first visit. Every action (cancel, log out, log in) is a POST carrying the session's CSRF
token in its form; a POST without it is a 403. Every user sees every job and acts only on
their own unless an admin (rbs.wire.auth.owner_refusal, as the jobs API).

The data comes from the jobs API's own pieces (its listing, job documents, log store,
outputs), not over HTTP. Pages are HTML built by rbs.server.dashboard_pages.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any

from aiohttp import web

from rbs.server import dashboard_pages as pages
from rbs.server.dashboard_assets import CSS, ICON, JS, VENDORED, vendored
from rbs.wire import jobs_api
from rbs.wire import jobs_api_requests as req
from rbs.wire.auth import Principal, Refused, Role, owner_refusal
from rbs.wire.errors import http_error

if TYPE_CHECKING:
    from rbs.server.execution import ExecutionEngine
    from rbs.server.invocations import InvocationStore
    from rbs.server.jobs_http import JobsApi

COOKIE = "rbs_session"
LOGIN_COOKIE = "rbs_login"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 10_000
MAX_OUTPUT_FILES = 1_000  # files listed per output tree on a job's page
PREFIX = "/ui"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class Session:
    principal: Principal
    csrf: str
    expires: float


def _loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ip_address(remote).is_loopback
    except ValueError:
        return False


class Dashboard:
    def __init__(
        self,
        api: JobsApi,
        *,
        tls: bool = False,
        engine: ExecutionEngine | None = None,
        instances: Sequence[str] = ("",),
    ) -> None:
        self.api = api
        self.tls = tls
        self.engine = engine  # the Builds page's recent executions
        self.instances = tuple(instances)
        self.sessions: dict[str, Session] = {}
        self.invocations: InvocationStore | None = None  # the Build Event Service's

    @staticmethod
    def owns(path: str) -> bool:
        """The paths the dashboard answers itself (the jobs API's token check skips them)."""
        return path in ("/", "/favicon.ico", PREFIX) or path.startswith(PREFIX + "/")

    def add_routes(self, app: web.Application) -> None:
        r = app.router
        r.add_get("/", self.home)
        r.add_get(PREFIX, self.home)
        r.add_get(PREFIX + "/", self.home)
        r.add_get(PREFIX + "/static/dashboard.css", self.css)
        r.add_get(PREFIX + "/static/dashboard.js", self.js)
        r.add_get(PREFIX + "/static/favicon.svg", self.icon)
        for name in VENDORED:
            r.add_get(PREFIX + "/static/" + name, self.vendored)
        r.add_get("/favicon.ico", self.icon)
        r.add_get(PREFIX + "/login", self.login_form)
        r.add_post(PREFIX + "/login", self.login)
        r.add_post(PREFIX + "/logout", self.logout)
        r.add_get(PREFIX + "/jobs", self._page(self.jobs))
        r.add_get(PREFIX + "/jobs/{id}", self._page(self.job))
        r.add_get(PREFIX + "/jobs/{id}/log", self._page(self.log))
        r.add_get(PREFIX + "/jobs/{id}/telemetry", self._page(self.telemetry))
        r.add_post(PREFIX + "/jobs/{id}/cancel", self._page(self.cancel))
        r.add_get(PREFIX + "/blobs/{fn}/{hash}/{size}", self._page(self.blob))
        r.add_get(PREFIX + "/workers", self._page(self.workers))
        r.add_get(PREFIX + "/queues", self._page(self.queues))
        r.add_get(PREFIX + "/builds", self._page(self.builds))
        r.add_get(PREFIX + "/invocations", self._page(self.invocation_list))
        r.add_get(PREFIX + "/invocation/{id}", self._page(self.invocation))

    # ---- sessions

    def _session(self, request: web.Request) -> Session | None:
        now = time.time()
        sid = request.cookies.get(COOKIE)
        s = self.sessions.get(sid) if sid else None
        if s is not None and s.expires < now:
            del self.sessions[sid or ""]
            s = None
        return s

    def _new_session(self, resp: web.StreamResponse, p: Principal) -> Session:
        now = time.time()
        if len(self.sessions) >= MAX_SESSIONS:
            for sid in [k for k, v in self.sessions.items() if v.expires < now]:
                del self.sessions[sid]
            while len(self.sessions) >= MAX_SESSIONS:  # the oldest go first
                del self.sessions[next(iter(self.sessions))]
        sid = secrets.token_urlsafe(32)
        s = Session(principal=p, csrf=secrets.token_urlsafe(24), expires=now + SESSION_SECONDS)
        self.sessions[sid] = s
        self._cookie(resp, COOKIE, sid)
        return s

    def _cookie(self, resp: web.StreamResponse, name: str, value: str) -> None:
        resp.set_cookie(
            name,
            value,
            path="/",
            httponly=True,
            samesite="Strict",
            secure=self.tls,
            max_age=SESSION_SECONDS,
        )

    def _open(self, request: web.Request) -> bool:
        """A server without tokens, asked from this host: no login."""
        return not self.api.auth.enabled and _loopback(request.remote)

    def _page(
        self, handler: Callable[[web.Request, Session], Awaitable[web.StreamResponse]]
    ) -> Handler:
        async def page(request: web.Request) -> web.StreamResponse:
            s = self._session(request)
            fresh: Session | None = None
            if s is None:
                if not self._open(request):
                    if not self.api.auth.enabled:
                        raise web.HTTPForbidden(
                            text="this server has no tokens: its dashboard is served to "
                            "127.0.0.1 only; start it with --tokens-file to open it to others"
                        )
                    if request.method != "GET":
                        raise web.HTTPForbidden(text="log in first: no session")
                    raise web.HTTPSeeOther(PREFIX + "/login")
                fresh = s = Session(
                    principal=self.api.auth.authenticate(None, None),
                    csrf="",
                    expires=0,
                )
            if request.method == "POST":
                form = await request.post()
                given = str(form.get("csrf", ""))
                if fresh is not None or not hmac.compare_digest(given, s.csrf):
                    raise web.HTTPForbidden(text="missing or wrong CSRF token; reload the page")
            try:
                resp = await handler(request, s)
            except web.HTTPException:
                raise
            except Exception as exc:
                mapped = http_error(exc)
                if mapped is None:
                    raise
                resp = self._html(
                    pages.layout("Error", pages.error_box(str(exc)), **self._who(s), live=False),
                    status=mapped[0],
                )
            if fresh is not None:
                made = self._new_session(resp, fresh.principal)
                if isinstance(resp, web.Response) and resp.text is not None:
                    resp.text = resp.text.replace(_CSRF_SLOT, made.csrf)
            return resp

        return page

    def _who(self, s: Session) -> dict[str, Any]:
        return {"user": s.principal.user, "csrf": s.csrf or _CSRF_SLOT}

    def _html(self, text: str, status: int = 200) -> web.Response:
        return web.Response(
            text=text,
            status=status,
            content_type="text/html",
            headers={
                "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-store",
            },
        )

    # ---- login

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPSeeOther(PREFIX + "/jobs")

    async def css(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=CSS, content_type="text/css")

    async def js(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=JS, content_type="text/javascript")

    async def vendored(self, request: web.Request) -> web.StreamResponse:
        name = request.path.rsplit("/", 1)[-1]
        body = await asyncio.to_thread(vendored, name)
        return web.Response(body=body, content_type=VENDORED[name][1], charset="utf-8")

    async def icon(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=ICON, content_type="image/svg+xml")

    async def login_form(self, request: web.Request, error: str | None = None) -> web.Response:
        if self._open(request):
            raise web.HTTPSeeOther(PREFIX + "/jobs")
        token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
        resp = self._html(pages.login_page(token, error), status=401 if error else 200)
        self._cookie(resp, LOGIN_COOKIE, token)
        return resp

    async def login(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        given, expected = str(form.get("csrf", "")), request.cookies.get(LOGIN_COOKIE, "")
        if not expected or not hmac.compare_digest(given, expected):
            raise web.HTTPForbidden(text="missing or wrong CSRF token; reload the login page")
        token = str(form.get("token", "")).strip()
        try:
            if not self.api.auth.enabled:
                raise Refused("this server has no tokens; open the dashboard from 127.0.0.1")
            p = self.api.auth.authenticate(token or None, None)
            if p.has(Role.RUN) or not (p.has(Role.USER) or p.has(Role.ADMIN)):
                raise Refused("this token is not a user's or an admin's")
        except Refused as e:
            self.api.auth.refusals.refused("dashboard login", request.remote, str(e))
            return await self.login_form(request, f"Not logged in: {e}.")
        resp = web.HTTPSeeOther(PREFIX + "/jobs")
        self._new_session(resp, p)
        resp.del_cookie(LOGIN_COOKIE, path="/")
        raise resp

    async def logout(self, request: web.Request) -> web.StreamResponse:
        s = self._session(request)
        form = await request.post()
        if s is None or not hmac.compare_digest(str(form.get("csrf", "")), s.csrf):
            raise web.HTTPForbidden(text="missing or wrong CSRF token; reload the page")
        self.sessions.pop(request.cookies.get(COOKIE, ""), None)
        resp = web.HTTPSeeOther(PREFIX + "/login")
        resp.del_cookie(COOKIE, path="/")
        raise resp

    # ---- pages

    async def jobs(self, request: web.Request, s: Session) -> web.StreamResponse:
        keys = ("state", "queue", "user", "name", "history", "sort", "order", "cursor", "limit")
        filters = {k: request.query[k] for k in keys if request.query.get(k)}
        now = time.time()
        page, error = None, None
        try:
            page = self.api.listing.page(req.list_params(filters), now)
        except Exception as exc:
            if http_error(exc) is None:
                raise
            error = str(exc)
        body = pages.jobs_page(filters, page, error, now)
        return self._html(pages.layout("Jobs", body, **self._who(s), live=True))

    async def job(self, request: web.Request, s: Session) -> web.StreamResponse:
        job_id = req.job_ref(request.match_info["id"])[0]
        doc = self.api._job_doc(job_id)
        v = self.api.driver.view(job_id)
        may = owner_refusal(s.principal, job_id, v.user, v.parent)
        outputs = await asyncio.to_thread(self._outputs, job_id)
        body = pages.job_page(
            doc, outputs, may_cancel=may, csrf=s.csrf or _CSRF_SLOT, now=time.time()
        )
        title = f"Job {doc['job_id']} {doc['name'] or ''}".strip()
        return self._html(pages.layout(title, body, **self._who(s), live=True, charts=True))

    async def telemetry(self, request: web.Request, s: Session) -> web.StreamResponse:
        """The job's samples for its charts: GET /v1/jobs/{id}/telemetry's answer."""
        from rbs.server.telemetry import query_doc

        job_id = req.job_ref(request.match_info["id"])[0]
        self.api.driver.state_of(job_id)  # NOT_FOUND for an unknown job
        doc = query_doc(self.api.driver.logs.telemetry, job_id, None, request.query, time.time())
        return web.json_response(doc)

    def _outputs(self, job_id: int) -> list[tuple[str, list[tuple[str, str, int]]]]:
        from rbs.cas.tree import walk_tree
        from rbs.model import Digest

        found = []
        for row in self.api.driver.outputs.latest(job_id):
            task = "" if row["task"] is None else f"task {row['task']}, "
            label = f"{task}attempt {row['attempt']}"
            files: list[tuple[str, str, int]] = []
            try:
                for path, leaf in walk_tree(self.api.store, Digest.parse(row["digest"])):
                    d = None if leaf is None else leaf.digest
                    if d is not None and len(files) < MAX_OUTPUT_FILES:
                        files.append((path, str(d), d.size))
            except (OSError, ValueError, KeyError) as exc:
                label += f" (cannot list: {exc})"
            found.append((label, files))
        return found

    async def log(self, request: web.Request, s: Session) -> web.StreamResponse:
        job_id = req.job_ref(request.match_info["id"])[0]
        state = self.api.driver.state_of(job_id)
        logs = self.api.driver.logs
        if request.query.get("download"):
            resp = web.StreamResponse(
                headers={
                    "Content-Type": "text/plain; charset=utf-8",
                    "Content-Disposition": f'attachment; filename="job-{job_id}.log"',
                }
            )
            await resp.prepare(request)
            after = 0
            for _ in range(1_000_000):  # bounded: 20,000 lines a read
                lines = logs.read(job_id, after=after)
                if not lines:
                    break
                after = lines[-1].seq
                await resp.write("".join(ln.text + "\n" for ln in lines).encode())
            await resp.write_eof()
            return resp
        after, _tail, _follow = req.logs_query(request.query)
        payload, _last = logs.read_payload(job_id, after=after)
        payload += jobs_api.log_end_payload(state)
        return web.Response(body=payload, content_type="application/x-ndjson")

    async def cancel(self, request: web.Request, s: Session) -> web.StreamResponse:
        from rbs.scheduler.events import TaskRef

        job_id = req.job_ref(request.match_info["id"])[0]
        self.api.driver.state_of(job_id)
        v = self.api.driver.view(job_id)
        reason = owner_refusal(s.principal, job_id, v.user, v.parent)
        if reason is not None:
            self.api.auth.refusals.refused("dashboard cancel", request.remote, reason)
            raise web.HTTPForbidden(text=reason)
        await self.api.driver.cancel([TaskRef(job_id=job_id, index=None)], by=s.principal.user)
        raise web.HTTPSeeOther(f"{PREFIX}/jobs/{job_id}")

    async def blob(self, request: web.Request, s: Session) -> web.StreamResponse:
        mi = request.match_info
        d = req.blob_digest(mi["fn"], mi["hash"], mi["size"])  # a bad one: 400, naming it
        name = request.query.get("name", "blob").rsplit("/", 1)[-1] or "blob"
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
        f = await asyncio.to_thread(self.api.store.open, d)
        try:
            resp = web.StreamResponse(
                headers={
                    "Content-Type": "application/octet-stream",
                    "Content-Length": str(d.size),
                    "Content-Disposition": f'attachment; filename="{safe}"',
                }
            )
            await resp.prepare(request)
            while chunk := await asyncio.to_thread(f.read, 1 << 20):
                await resp.write(chunk)
        finally:
            f.close()
        await resp.write_eof()
        return resp

    async def workers(self, request: web.Request, s: Session) -> web.StreamResponse:
        status = jobs_api.status_doc(self.api.driver.hub.status())
        draining = {w["worker_id"] for w in status.get("workers", []) if self._draining(w)}
        body = pages.workers_page(status, draining, time.time())
        return self._html(pages.layout("Workers", body, **self._who(s), live=True))

    def _draining(self, w: dict[str, Any]) -> bool:
        r = self.api.reservations
        return r is not None and r.is_draining(str(w.get("worker_id", "")))

    async def builds(self, request: web.Request, s: Session) -> web.StreamResponse:
        from rbs.server import dashboard_builds as b

        st = self.api.driver.hub.status()
        f = await asyncio.to_thread(
            b.figures, self.api.metrics, int(st.running_actions), int(st.queued_actions)
        )
        body = b.builds_page(f, b.recent(self.engine, self.instances))
        return self._html(pages.layout("Builds", body, **self._who(s), live=True))

    async def invocation_list(self, request: web.Request, s: Session) -> web.StreamResponse:
        from rbs.server import dashboard_invocations as di

        rows = [] if self.invocations is None else self.invocations.recent(200)
        body = di.list_page(rows, recording=self.invocations is not None)
        return self._html(pages.layout("Invocations", body, **self._who(s), live=True))

    async def invocation(self, request: web.Request, s: Session) -> web.StreamResponse:
        from rbs.server import dashboard_invocations as di

        inv_id = request.match_info["id"]
        doc = None if self.invocations is None else self.invocations.get(inv_id)
        if doc is None:
            body = pages.error_box(f"no invocation {inv_id} is recorded here")
            return self._html(
                pages.layout("Invocation", body, **self._who(s), live=False), status=404
            )
        texts = await asyncio.to_thread(di.stderr_texts, doc, self.api.store)
        body = di.detail_page(doc, texts, time.time())
        live = doc.get("finished") is None
        return self._html(pages.layout("Invocation", body, **self._who(s), live=live))

    async def queues(self, request: web.Request, s: Session) -> web.StreamResponse:
        doc = jobs_api.queues_doc(self.api.driver.sched.queues())
        from rbs.server.reservations import window_doc

        r = self.api.reservations
        windows = [] if r is None else [window_doc(w) for w in r.windows.values()]
        windows.sort(key=lambda w: w["start"])
        body = pages.queues_page(doc["queues"], windows)
        return self._html(pages.layout("Queues", body, **self._who(s), live=True))


# A page built for a visitor whose session is made with the answer carries this in
# place of the CSRF token, replaced once the session exists.
_CSRF_SLOT = "\x00csrf\x00"
