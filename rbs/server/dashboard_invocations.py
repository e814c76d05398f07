"""The dashboard's Invocations pages: the list of recorded build invocations and one
invocation's page (command, targets, timing, actions, cache hits, failures with their
stderr, test results, console output). The documents come from `InvocationStore`, which
the Build Event Service fills (`rbs.server.bes_service`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from rbs.server.dashboard_pages import _dl, e, span, when

if TYPE_CHECKING:
    from rbs.cas.store import BlobStore

MAX_STDERR = 64 * 1024  # bytes of one failed action's stderr shown
# bytestream://HOST:PORT[/INSTANCE]/blobs/HASH/SIZE, as Bazel writes a CAS file's URI.
_BYTESTREAM = re.compile(r"^bytestream://[^/]+(?:/.*)?/blobs/([0-9a-f]{64})/(\d+)$")


def _status(ok: bool | None, text: str) -> str:
    cls = "RUNNING" if ok is None else ("COMPLETED" if ok else "FAILED")
    return f'<span class="state {cls}">{e(text)}</span>'


def _outcome(doc: Mapping[str, Any]) -> str:
    code = doc.get("exit_code")
    if code is None:
        return _status(None, "running")
    name = doc.get("exit_name") or ("SUCCESS" if code == 0 else "FAILED")
    return _status(code == 0, f"{name} ({code})")


def _link(inv_id: str) -> str:
    return f'<a href="/ui/invocation/{quote(inv_id, safe="")}"><code>{e(inv_id)}</code></a>'


def list_page(rows: Sequence[Mapping[str, Any]], *, recording: bool) -> str:
    if not recording:
        return '<p class="note">This server records no invocations.</p>'
    body = "".join(
        "<tr>"
        f"<td>{_link(str(r['id']))}</td><td>{e(r.get('tool'))}</td>"
        f"<td>{e(r.get('command'))}</td><td>{e(' '.join(r.get('targets') or []))}</td>"
        f"<td>{_outcome(r)}</td><td>{e(when(r.get('started')))}</td>"
        f"<td>{e(span(r.get('started'), r.get('finished'), r.get('started') or 0))}</td>"
        f'<td class="num">{e(r.get("actions_executed", ""))}</td>'
        f'<td class="num">{e(r.get("cache_hits", ""))}</td>'
        f'<td class="num">{e(r.get("failures"))}</td>'
        f'<td class="num">{e(_tests(r))}</td></tr>'
        for r in rows
    )
    empty = (
        '<tr><td colspan="11" class="note">No invocation yet: run bazel with '
        "<code>--bes_backend=grpc://HOST:PORT</code>.</td></tr>"
    )
    return (
        '<div class="live-part"><table id="invocations"><tr><th>Invocation</th><th>Tool</th>'
        "<th>Command</th><th>Targets</th><th>Result</th><th>Started</th><th>Took</th>"
        '<th class="num">Actions</th><th class="num">Cache hits</th>'
        '<th class="num">Failed actions</th><th class="num">Tests</th></tr>'
        + (body or empty)
        + "</table></div>"
    )


def _tests(r: Mapping[str, Any]) -> str:
    n, bad = int(r.get("tests") or 0), int(r.get("tests_failed") or 0)
    return f"{n - bad}/{n} passed" if n else ""


def stderr_texts(doc: Mapping[str, Any], store: BlobStore | None) -> list[str | None]:
    """Each failure's stderr: its inline text, or the CAS blob its bytestream:// URI names
    when this server's CAS holds it (else None: the page shows the URI)."""
    from rbs.cas.errors import BlobNotFound
    from rbs.model import Digest, DigestFunction

    out: list[str | None] = []
    for f in doc.get("failures") or []:
        err = f.get("stderr") or {}
        text = err.get("text")
        m = _BYTESTREAM.match(str(err.get("uri", "")))
        if text is None and m is not None and store is not None:
            d = Digest(function=DigestFunction.SHA256, hash=m.group(1), size=int(m.group(2)))
            try:
                with store.open(d) as fh:
                    text = fh.read(MAX_STDERR).decode("utf-8", "replace")
            except (BlobNotFound, OSError):
                text = None
        out.append(text)
    return out


def _failures(doc: Mapping[str, Any], texts: Sequence[str | None]) -> str:
    parts = []
    for f, text in zip(doc.get("failures") or [], texts, strict=False):
        uri = (f.get("stderr") or {}).get("uri", "")
        shown = (
            f'<pre class="stderr">{e(text)}</pre>'
            if text
            else (f'<p class="note">stderr at <code>{e(uri)}</code></p>' if uri else "")
        )
        parts.append(
            f'<section class="failure"><h3>{e(f.get("label") or f.get("output"))}</h3>'
            + _dl(
                [
                    ("Action", f.get("type", "")),
                    ("Output", f.get("output", "")),
                    ("Exit code", f.get("exit_code", "")),
                ]
            )
            + shown
            + "</section>"
        )
    return "".join(parts) or '<p class="note">No action failed.</p>'


def _test_rows(doc: Mapping[str, Any]) -> str:
    rows = "".join(
        "<tr>"
        f"<td>{e(t.get('label'))}</td>"
        f"<td>{_status(t.get('status') == 'PASSED', str(t.get('status')))}</td>"
        f'<td class="num">{e(t.get("duration_ms"))} ms</td>'
        f"<td>{'cached' if t.get('cached') else ''}</td>"
        f'<td class="num">{e(t.get("run"))}/{e(t.get("shard"))}/{e(t.get("attempt"))}</td>'
        f"<td>{e(t.get('details'))}</td></tr>"
        for t in doc.get("tests") or []
    )
    return (
        '<table id="tests"><tr><th>Test</th><th>Status</th><th class="num">Took</th>'
        '<th>Cache</th><th class="num">Run/shard/attempt</th><th>Details</th></tr>'
        + (rows or '<tr><td colspan="6" class="note">No test ran.</td></tr>')
        + "</table>"
    )


def detail_page(doc: Mapping[str, Any], texts: Sequence[str | None], now: float) -> str:
    completed: Mapping[str, bool] = doc.get("completed") or {}
    built = "".join(
        f"<tr><td>{e(label)}</td><td>{_status(ok, 'built' if ok else 'failed')}</td></tr>"
        for label, ok in sorted(completed.items())
    )
    summary = _dl(
        [
            ("Invocation", doc.get("id")),
            ("Tool", doc.get("tool")),
            ("Command", doc.get("command")),
            ("Targets", " ".join(doc.get("targets") or [])),
            ("Command line", " ".join(doc.get("args") or [])),
            ("Started", when(doc.get("started"))),
            ("Finished", when(doc.get("finished"))),
            ("Took", span(doc.get("started"), doc.get("finished"), now)),
            ("Actions executed", doc.get("actions_executed", "")),
            ("Actions created", doc.get("actions_created", "")),
            ("Remote cache hits", doc.get("cache_hits", "")),
        ]
    )
    return (
        '<div class="live-part">'
        f'<p id="outcome">{_outcome(doc)}</p>{summary}'
        f"<h2>Failures</h2>{_failures(doc, texts)}"
        f"<h2>Tests</h2>{_test_rows(doc)}"
        '<h2>Targets</h2><table id="targets"><tr><th>Target</th><th>Result</th></tr>'
        + (built or '<tr><td colspan="2" class="note">No target completed.</td></tr>')
        + "</table>"
        f'<h2>Console</h2><pre id="console">{e(doc.get("console", ""))}</pre></div>'
    )
