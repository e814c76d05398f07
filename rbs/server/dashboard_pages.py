"""The dashboard's HTML: server-rendered pages built from the jobs API's documents.

Every value is escaped (`html.escape`) where it enters the page; every link is relative
to this server (no external URL, no CDN): the stylesheet and script are
rbs.server.dashboard_assets, served under /ui/static/.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

TERMINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL")
LIST_SORTS = ("id", "submit", "state", "priority")
CHART_POINTS = 300  # samples per run a job page's charts ask for
CHART_HEAD = (  # uPlot, vendored (rbs.server.dashboard_assets.VENDORED)
    '<link rel="stylesheet" href="/ui/static/uPlot.min.css">'
    '<script src="/ui/static/uPlot.iife.min.js"></script>'
)


def e(value: object) -> str:
    return escape("" if value is None else str(value), quote=True)


def when(t: float | None, now: float | None = None) -> str:
    if not t:
        return ""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return stamp


def span(start: float | None, end: float | None, now: float) -> str:
    if not start:
        return ""
    secs = max(0.0, (end or now) - start)
    if secs < 120:
        return f"{secs:.1f} s"
    if secs < 7200:
        return f"{secs / 60:.1f} min"
    return f"{secs / 3600:.1f} h"


def layout(
    title: str, body: str, *, user: str | None, csrf: str | None, live: bool, charts: bool = False
) -> str:
    who = ""
    if user is not None:
        who = f'<span class="who">{e(user)}</span>'
        if csrf is not None:
            who += (
                '<form method="post" action="/ui/logout">'
                f'<input type="hidden" name="csrf" value="{e(csrf)}">'
                '<button type="submit">Log out</button></form>'
            )
    nav = "".join(
        f'<a href="/ui/{p}">{label}</a>'
        for p, label in (
            ("jobs", "Jobs"),
            ("workers", "Workers"),
            ("queues", "Queues"),
            ("builds", "Builds"),
            ("invocations", "Invocations"),
        )
    )
    toggle = (
        '<label class="note"><input type="checkbox" id="live" checked> live</label>' if live else ""
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{e(title)} - rbs</title>"
        '<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/ui/static/dashboard.css">'
        + (CHART_HEAD if charts else "")
        + '<script src="/ui/static/dashboard.js"></script></head><body>'
        f'<nav><a href="/ui/jobs">rbs</a>{nav}{toggle}{who}</nav>'
        f"<main{' data-live' if live else ''}><h1>{e(title)}</h1>{body}</main></body></html>"
    )


def error_box(message: str) -> str:
    return f'<p class="error" role="alert">{e(message)}</p>'


def state_cell(state: str) -> str:
    return f'<span class="state {e(state)}">{e(state)}</span>'


# ---------------------------------------------------------------- login


def login_page(csrf: str, error: str | None) -> str:
    body = (error_box(error) if error else "") + (
        '<form method="post" action="/ui/login" id="login">'
        f'<input type="hidden" name="csrf" value="{e(csrf)}">'
        '<label>Token <input type="password" name="token" id="token" autocomplete="off" '
        'required></label> <button type="submit">Log in</button></form>'
        '<p class="note">The token is the one <code>rbs</code> uses (RBS_REMOTE_TOKEN); '
        "ask an admin for one made by <code>rbs remote token add</code>.</p>"
    )
    return layout("Log in", body, user=None, csrf=None, live=False)


# ---------------------------------------------------------------- jobs


def jobs_query(filters: Mapping[str, str], **changes: str | None) -> str:
    q = {k: v for k, v in filters.items() if v}
    for k, v in changes.items():
        if v:
            q[k] = v
        else:
            q.pop(k, None)
    return "/ui/jobs" + ("?" + urlencode(q) if q else "")


def jobs_page(
    filters: Mapping[str, str], page: Mapping[str, Any] | None, error: str | None, now: float
) -> str:
    f = {k: filters.get(k, "") for k in ("state", "queue", "user", "name", "sort", "order")}
    form = (
        '<form class="filters" method="get" action="/ui/jobs">'
        f'<label>State <input name="state" value="{e(f["state"])}" '
        'placeholder="PENDING,RUNNING"></label>'
        f'<label>Queue <input name="queue" value="{e(f["queue"])}"></label>'
        f'<label>User <input name="user" value="{e(f["user"])}"></label>'
        f'<label>Name <input name="name" value="{e(f["name"])}" placeholder="train-*"></label>'
        f'<label><input type="checkbox" name="history" value="1"'
        f"{' checked' if filters.get('history') else ''}> ended jobs too</label>"
        f'<input type="hidden" name="sort" value="{e(f["sort"])}">'
        f'<input type="hidden" name="order" value="{e(f["order"])}">'
        '<button type="submit">Filter</button></form>'
    )
    if error is not None or page is None:
        return form + error_box(error or "no page")
    base = {k: v for k, v in filters.items() if k != "cursor"}

    def head(label: str, key: str | None, cls: str = "") -> str:
        if key is None:
            return f'<th class="{cls}">{label}</th>'
        desc = f["sort"] == key and f["order"] != "desc"
        link = jobs_query(base, sort=key, order="desc" if desc else "asc")
        mark = (" ▼" if f["order"] == "desc" else " ▲") if (f["sort"] or "id") == key else ""
        return f'<th class="{cls}"><a href="{e(link)}">{label}{mark}</a></th>'

    rows = []
    for j in page["jobs"]:
        rows.append(
            "<tr>"
            f'<td class="num"><a href="/ui/jobs/{e(j["job_id"])}">{e(j["job_id"])}</a></td>'
            f"<td>{e(j['name'])}</td><td>{e(j['user'])}</td><td>{e(j['queue'])}</td>"
            f"<td>{state_cell(j['state'])}</td>"
            f'<td class="num">{e(j["priority"]["total"])}</td>'
            f"<td>{e(when(j['submit_time']))}</td>"
            f"<td>{e(span(j['start_time'], j['end_time'], now))}</td>"
            f"<td>{e(', '.join(j['workers']))}</td><td>{e(j['reason'] or '')}</td></tr>"
        )
    table = (
        '<table id="jobs"><thead><tr>'
        + head("ID", "id", "num")
        + head("Name", None)
        + head("User", None)
        + head("Queue", None)
        + head("State", "state")
        + head("Priority", "priority", "num")
        + head("Submitted", "submit")
        + head("Ran", None)
        + head("Workers", None)
        + head("Reason", None)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    shown = len(page["jobs"])
    nav = f'<p id="count">{shown} shown of {page["total"]:,} matching jobs. '
    if filters.get("cursor"):
        nav += f'<a href="{e(jobs_query(base))}" id="first">first page</a> '
    if page.get("next_cursor"):
        link = jobs_query(base, cursor=page["next_cursor"])
        nav += f'<a href="{e(link)}" id="next">next page</a>'
    nav += "</p>"
    empty = "" if rows else '<p class="note">No job matches.</p>'
    return form + f'<div class="live-part">{nav}{table}{empty}</div>'


# ---------------------------------------------------------------- one job


def _dl(pairs: Iterable[tuple[str, object]]) -> str:
    return "<dl>" + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in pairs) + "</dl>"


def job_page(
    job: Mapping[str, Any],
    outputs: Sequence[tuple[str, Sequence[tuple[str, str, int]]]],
    *,
    may_cancel: str | None,
    csrf: str,
    now: float,
) -> str:
    jid = e(job["job_id"])
    state = job["state"]
    ended = state in TERMINAL_STATES
    summary = _dl(
        [
            ("State", state),
            (
                "Why pending" if state == "PENDING" else ("How it ended" if ended else "Reason"),
                job["reason"] or ("" if not ended else state),
            ),
            ("User", job["user"]),
            ("Queue", job["queue"]),
            ("Submitted", when(job["submit_time"])),
            ("Started", when(job["start_time"])),
            ("Ended", when(job["end_time"])),
            ("Exit code", job["exit_code"]),
            ("Signal", job["signal"]),
            ("Out of memory", "yes" if job["oom"] else ""),
            ("Time limit", job["time_limit"] or ""),
        ]
    )
    cancel = ""
    if not ended:
        if may_cancel is None:
            cancel = (
                f'<form method="post" action="/ui/jobs/{jid}/cancel" id="cancel">'
                f'<input type="hidden" name="csrf" value="{e(csrf)}">'
                '<button type="submit">Cancel this job</button></form>'
            )
        else:
            cancel = f'<p class="note" id="cancel-refused">{e(may_cancel)}</p>'
    p = job["priority"]
    priority = _dl(
        [
            ("Base", p["base"]),
            ("Queue weight", p["queue_weight"]),
            ("Age bonus", p["age_bonus"]),
            ("Total", p["total"]),
        ]
    )
    res = job["resources"]
    prov = job.get("provenance") or {}
    # Provenance names a resource `resources.cpu`; the document's resources say `cpu`.
    resources = (
        '<table id="resource-table"><tr><th>Resource</th><th>Value</th><th>From</th></tr>'
        + "".join(
            f"<tr><td>{e(k)}</td><td>{e(v)}</td>"
            f"<td>{e(prov.get(f'resources.{k}', prov.get(k, '')))}</td></tr>"
            for k, v in res.items()
        )
        + "</table>"
    )
    shown = {f"resources.{k}" for k in res} | set(res)
    others = [(k, v) for k, v in prov.items() if k not in shown]
    if others:
        resources += "<h3>Other settings and where they came from</h3>" + _dl(others)
    attempts = "".join(
        "<tr>"
        f"<td>{e(a['task'] if a['task'] is not None else '')}</td><td>{e(a['attempt'])}</td>"
        f"<td>{state_cell(a['state'])}</td><td>{e(a['reason'] or '')}</td>"
        f"<td>{e(', '.join(a['workers']))}</td><td>{e(when(a['start_time']))}</td>"
        f"<td>{e(when(a['end_time']))}</td><td>{e(span(a['start_time'], a['end_time'], now))}</td>"
        f"<td>{e(a['exit_code'])}</td></tr>"
        for a in job["history"]
    )
    timeline = (
        f"<p>Submitted {e(when(job['submit_time']))}; eligible "
        f"{e(when(job['eligible_time']))}.</p>"
        '<table id="attempts"><tr><th>Task</th><th>Attempt</th><th>State</th><th>Reason</th>'
        "<th>Workers</th><th>Started</th><th>Ended</th><th>Ran</th><th>Exit</th></tr>"
        + (attempts or '<tr><td colspan="9" class="note">No attempt yet.</td></tr>')
        + "</table>"
    )
    changes = "".join(
        f"<li>{e(when(c['time']))}: {e(c['action'])} by {e(c['by'])}</li>" for c in job["changes"]
    )
    if changes:
        timeline += f"<ul>{changes}</ul>"
    log = (
        '<p><input id="log-search" placeholder="search the log"> '
        f'<a href="/ui/jobs/{jid}/log?download=1" id="log-download">download</a> '
        '<span id="log-status" class="note"></span></p>'
        f'<pre id="log" data-src="/ui/jobs/{jid}/log"></pre>'
    )
    done = " data-done" if job["state"] in TERMINAL_STATES else ""
    charts = (
        '<p class="note"><span id="charts-status">Loading the samples.</span> Drawn with '
        '<a href="/ui/static/uPlot.LICENSE.txt">uPlot</a>.</p>'
        f'<div id="charts" data-src="/ui/jobs/{jid}/telemetry" '
        f'data-points="{CHART_POINTS}"{done}></div>'
    )
    files = []
    for label, entries in outputs:
        items = "".join(
            f'<li><a href="/ui/blobs/{quote(d.replace(":", "/", 1))}?name={quote(path)}">{e(path)}</a> '
            f'<span class="note">{size:,} bytes</span></li>'
            for path, d, size in entries
        )
        files.append(f"<h3>{e(label)}</h3><ul>{items or '<li>(no files)</li>'}</ul>")
    out = "".join(files) or '<p class="note">No outputs (yet).</p>'
    body = (
        f'<div class="live-part"><section id="summary">{summary}{cancel}</section>'
        f'<section id="timeline"><h2>Timeline</h2>{timeline}</section></div>'
        f'<section id="priority"><h2>Priority</h2>{priority}</section>'
        f'<section id="resources"><h2>Resources</h2>{resources}</section>'
        f'<section id="telemetry"><h2>Telemetry</h2>{charts}</section>'
        f"<section><h2>Log</h2>{log}</section>"
        f'<section id="outputs"><h2>Outputs</h2>{out}</section>'
    )
    return body


# ---------------------------------------------------------------- cluster


def workers_page(status: Mapping[str, Any], draining: set[str], now: float) -> str:
    rows = []
    for w in status.get("workers", []):
        hb = w.get("last_heartbeat", "")
        rows.append(
            "<tr>"
            f"<td>{e(w.get('name') or w.get('worker_id'))}</td><td>{e(w.get('hostname'))}</td>"
            f"<td>{e(w.get('state'))}{' (draining)' if w.get('worker_id') in draining else ''}"
            f'</td><td class="num">{e(w.get("cpus", 0))}</td>'
            f'<td class="num">{int(w.get("memory_bytes", 0)) / 2**30:.1f} GiB</td>'
            f"<td>{e(', '.join(w.get('gpu_ids', [])) or '-')}</td>"
            f'<td class="num">{e(w.get("build_slots_used", 0))} / {e(w.get("build_slots", 0))}</td>'
            f'<td class="num">{e(w.get("job_slots_used", 0))} / {e(w.get("job_slots", 0))}</td>'
            f"<td>{e(hb)}</td><td>{e(w.get('version'))}</td></tr>"
        )
    jobs = status.get("jobs_by_state", {})
    counts = ", ".join(f"{k} {v}" for k, v in sorted(jobs.items()) if int(v))
    return (
        '<div class="live-part">'
        f"<p>Build actions: {e(status.get('running_actions', 0))} running, "
        f"{e(status.get('queued_actions', 0))} queued. Jobs: {e(counts or 'none')}.</p>"
        '<table id="workers"><tr><th>Worker</th><th>Host</th><th>State</th>'
        '<th class="num">CPUs</th><th class="num">Memory</th><th>GPUs</th>'
        '<th class="num">Build slots used</th><th class="num">Job slots used</th>'
        "<th>Last heartbeat</th><th>Version</th></tr>"
        + ("".join(rows) or '<tr><td colspan="10" class="note">No worker.</td></tr>')
        + "</table></div>"
    )


def reservations_table(windows: Sequence[Mapping[str, Any]]) -> str:
    """Maintenance reservations and drains (rbs.server.reservations.window_doc)."""
    rows = "".join(
        f"<tr><td>{e(w['name'])}</td><td>{e(when(w['start']))}</td>"
        f"<td>{e(when(w['end']) if w['end'] else 'until resumed')}</td>"
        f"<td>{e(', '.join(w['workers']) or 'every worker')}</td><td>{e(w['reason'])}</td></tr>"
        for w in windows
    )
    return (
        '<h2>Reservations</h2><table id="reservations"><tr><th>Name</th><th>Start</th>'
        "<th>End</th><th>Workers</th><th>Reason</th></tr>"
        + (rows or '<tr><td colspan="5" class="note">No reservation.</td></tr>')
        + "</table>"
    )


def queues_page(
    queues: Sequence[Mapping[str, Any]], windows: Sequence[Mapping[str, Any]] = ()
) -> str:
    rows = "".join(
        f'<tr><td><a href="{e(jobs_query({}, queue=q["name"]))}">{e(q["name"])}</a></td>'
        f'<td class="num">{e(q["priority_weight"])}</td>'
        f"<td>{e(q['default_time_limit'] or '')}</td><td>{e(q['max_time_limit'] or '')}</td>"
        f'<td class="num">{e(q["pending_jobs"])}</td><td class="num">{e(q["running_jobs"])}</td>'
        f'<td class="num">{e(q["pending_tasks"])}</td>'
        f'<td class="num">{e(q["running_tasks"])}</td></tr>'
        for q in queues
    )
    return (
        '<div class="live-part"><table id="queues"><tr><th>Queue</th>'
        '<th class="num">Weight</th><th>Default time limit</th><th>Max time limit</th>'
        '<th class="num">Pending jobs</th><th class="num">Running jobs</th>'
        '<th class="num">Pending tasks</th><th class="num">Running tasks</th></tr>'
        + rows
        + "</table>"
        + reservations_table(windows)
        + "</div>"
    )
