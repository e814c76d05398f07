"""The jobs HTTP API's requests: the client's builders and the server's parsers, side by side.

Every request body and every path or query with structure is defined once, three ways
that must agree: the function the client builds it with (`submit_flags_body`,
`jobs_path`, ...), the function the server reads it with (`submit_request`,
`list_query`, ...), which refuses a malformed request with an InvalidRequest that names
the field and the form it wants, and its JSON Schema in rbs.wire.jobs_api_schema
(`REQUEST_SCHEMAS`). The responses are in rbs.wire.jobs_api; docs/design/jobs.md lists
the routes.

Like rbs.wire.jobs_api, this module is on the path of `rbs job submit`, so it imports
nothing at run time: the builders use the standard library only, and each parser
imports what it needs (the manifest code, the error types, which pull in grpc) when the
server calls it.
"""

from __future__ import annotations

import os

# Not imported from typing, which costs `rbs job submit` start-up for nothing at run
# time; type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from rbs.model import Digest, JobManifest
    from rbs.wire.errors import InvalidRequest

JOBS_PATH = "/v1/jobs"
CANCEL_PATH = "/v1/jobs/cancel"
QUEUES_PATH = "/v1/queues"
STATUS_PATH = "/v1/status"
MISSING_PATH = "/v1/cas/missing"
BATCH_PATH = "/v1/cas/batch"

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~")


def quote(text: str) -> str:
    """Percent-encode one URL component (urllib.parse costs ~4 ms to import)."""
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def _query(q: Mapping[str, str]) -> str:
    return "&".join(f"{quote(k)}={quote(v)}" for k, v in q.items())


# ---------------------------------------------------------------- client: values -> requests


def new_request_id() -> str:
    """A fresh submit request id: a random UUID (version 4), without importing uuid."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _with_id(body: dict[str, Any], request_id: str | None) -> dict[str, Any]:
    if request_id is not None:
        body["request_id"] = request_id
    return body


def submit_flags_body(
    command: Sequence[str] | None,
    flags: Mapping[str, Any],
    input_root: Digest | None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """`POST /v1/jobs` with `rbs job submit`'s flags as typed (`{"--time": "1h"}`): the
    server layers them into the manifest, so the client imports none of that code.
    `request_id` (`new_request_id`, once per submit call) makes a retried call safe."""
    body = {
        "command": list(command or ()),
        "flags": dict(flags),
        "input_root": None if input_root is None else str(input_root),
    }
    return _with_id(body, request_id)


def submit_manifest_body(
    manifest: JobManifest, provenance: Mapping[str, str] | None, request_id: str | None = None
) -> dict[str, Any]:
    """`POST /v1/jobs` with a whole manifest (a job target's, with the flags layered in)."""
    from rbs.wire.manifest import manifest_to_dict

    body = {"manifest": manifest_to_dict(manifest), "provenance": dict(provenance or {})}
    return _with_id(body, request_id)


def cancel_body(ids: Sequence[str]) -> dict[str, Any]:
    """`POST /v1/jobs/cancel`: job and task ids (`ID`, `ID_INDEX`)."""
    return {"ids": list(ids)}


def job_path(job_id: str) -> str:
    """`GET /v1/jobs/{id}`: one job, or one task of an array."""
    return f"{JOBS_PATH}/{quote(job_id)}"


def outputs_path(job_id: str) -> str:
    return f"{job_path(job_id)}/outputs"


def wait_path(job_id: str, timeout: float) -> str:
    """`GET /v1/jobs/{id}/wait`: answers when the job ends or after `timeout` seconds."""
    return f"{job_path(job_id)}/wait?timeout={timeout:.3f}"


def jobs_path(
    states: Sequence[str] = (),
    queue: str | None = None,
    history: bool = False,
    *,
    user: str | None = None,
    name: str | None = None,
    array: bool | None = None,
    parent: str | None = None,
    sort: str | None = None,
    order: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> str:
    """`GET /v1/jobs`: one page of the live jobs, or those in `states` (names, any case),
    filtered by queue, user, name (a glob with `*`), whether they are arrays and the job
    whose runs submitted them (`parent`), in
    `sort` order (`id`, `submit`, `state`, `priority`; `order` asc or desc), `limit` rows
    from `cursor` (the previous page's `next_cursor`). See `list_params`."""
    q: dict[str, str] = {}
    if states:
        q["state"] = ",".join(states)
    if queue:
        q["queue"] = queue
    if history:
        q["history"] = "1"
    named = (("user", user), ("name", name), ("parent", parent), ("sort", sort), ("order", order))
    for key, value in named:
        if value:
            q[key] = value
    if array is not None:
        q["array"] = "1" if array else "0"
    if limit is not None:
        q["limit"] = str(limit)
    if cursor:
        q["cursor"] = cursor
    return JOBS_PATH + ("?" + _query(q) if q else "")


def logs_path(job_id: str, *, after: int = 0, follow: bool = False, tail: int | None = None) -> str:
    """`GET /v1/jobs/{id}/logs`: the lines after display seq `after` (the last `tail`
    of them); with `follow`, streamed until the job ends."""
    q = {"after": str(after)}
    if follow:
        q["follow"] = "1"
    if tail is not None:
        q["tail"] = str(tail)
    return f"{job_path(job_id)}/logs?" + _query(q)


def blob_path(digest: Digest) -> str:
    """`GET` or `PUT /v1/cas/blobs/{fn}/{hash}/{size}`: one blob, streamed."""
    return f"/v1/cas/blobs/{digest.function.value}/{digest.hash}/{digest.size}"


def missing_body(digests: Iterable[Digest]) -> dict[str, Any]:
    """`POST /v1/cas/missing`: which of these blobs the cluster lacks."""
    return {"digests": [str(d) for d in digests]}


def batch_body(blobs: Sequence[tuple[Digest, bytes]]) -> bytes:
    """`POST /v1/cas/batch`: a JSON list of the digests, a newline, then their bytes."""
    header = ",".join(f'"{d}"' for d, _ in blobs)
    return b"".join([f"[{header}]\n".encode(), *(data for _, data in blobs)])


# ---------------------------------------------------------------- server: requests -> values


def _invalid(message: str) -> InvalidRequest:
    from rbs.wire.errors import InvalidRequest

    return InvalidRequest(message)


def _digest(text: str, field: str) -> Digest:
    from rbs.model import Digest

    try:
        return Digest.parse(text)
    except ValueError as e:
        raise _invalid(f"{field}: {e}") from None


def submit_request(body: Any) -> tuple[JobManifest, dict[str, str]]:
    """A `POST /v1/jobs` body as the job's manifest and provenance: a manifest as given,
    or the flags layered over the command (rbs.wire.manifest.apply_flags; errors name the
    flag)."""
    if not isinstance(body, dict) or not ("manifest" in body or "flags" in body):
        raise _invalid(
            'want {"manifest": {...}, "provenance": {...}} or '
            '{"command": [...], "flags": {"--time": "1h", ...}, "input_root": null}'
        )
    from rbs.wire.manifest import apply_flags, manifest_from_dict

    if "manifest" in body:
        manifest = manifest_from_dict(body["manifest"])
        prov = body.get("provenance") or {}
        if not isinstance(prov, dict):
            raise _invalid("provenance must be an object of field -> source")
        from rbs.wire.manifest_limits import check_provenance

        prov = check_provenance(prov)
    else:
        command, flags, root = body.get("command"), body.get("flags"), body.get("input_root")
        if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
            raise _invalid("command must be a list of strings")
        if not isinstance(flags, dict):
            raise _invalid("flags must be an object of flag -> value")
        if root is not None and not isinstance(root, str):
            raise _invalid("input_root must be a digest string (FUNCTION:HASH/SIZE) or null")
        input_root = None if root is None else _digest(root, "input_root")
        manifest, prov = apply_flags(
            None, None, flags, command=command or None, input_root=input_root
        )
    return manifest, {str(k): str(v) for k, v in prov.items()}


def submit_request_id(body: Any) -> str | None:
    """A `POST /v1/jobs` body's client request id, or None when it has none."""
    rid = body.get("request_id") if isinstance(body, dict) else None
    if rid is None:
        return None
    if (
        not isinstance(rid, str)
        or not 0 < len(rid) <= 128
        or not all(c.isascii() and (c.isalnum() or c in "._:-") for c in rid)
    ):
        raise _invalid("request_id must be a string of 1-128 letters, digits, '.', '_', ':', '-'")
    return rid


def cancel_request(body: Any) -> list[tuple[int, int | None]]:
    """A `POST /v1/jobs/cancel` body as (job id, array index or None) pairs."""
    ids = body.get("ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not ids:
        raise _invalid('want {"ids": ["ID", "ID_INDEX", ...]}')
    from rbs.wire.specs import parse_task_id

    return [parse_task_id(str(i)) for i in ids]


# What `rbs job update` may change (as `rbs job submit` flags) and nothing else.
UPDATE_FLAGS = ("--begin", "--priority", "--time", "--queue")


def update_path(job_id: str) -> str:
    """`POST /v1/jobs/{id}/update` {"flags": {"--priority": 3}}: change a pending job."""
    return f"{job_path(job_id)}/update"


def update_body(flags: Mapping[str, Any]) -> dict[str, Any]:
    return {"flags": dict(flags)}


def update_request(body: Any) -> dict[str, Any]:
    """A `POST /v1/jobs/{id}/update` body's flags: some of UPDATE_FLAGS, with values."""
    flags = body.get("flags") if isinstance(body, dict) else None
    if not isinstance(flags, dict) or not flags:
        raise _invalid('want {"flags": {"--priority": 3, "--begin": ..., ...}}')
    for flag, value in flags.items():
        if flag not in UPDATE_FLAGS:
            raise _invalid(f"{flag}: rbs job update changes only {', '.join(UPDATE_FLAGS)}")
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise _invalid(f"{flag}: want text or a number, not {type(value).__name__}")
    return dict(flags)


def job_ref(text: str) -> tuple[int, int | None]:
    """The `{id}` of a job path as (job id, array index or None)."""
    from rbs.wire.specs import parse_task_id

    return parse_task_id(text)


def list_query(query: Mapping[str, str]) -> tuple[frozenset[str], str | None, bool]:
    """`GET /v1/jobs`'s query as (the states asked for, the queue, whether ended jobs
    count when no state is named)."""
    from rbs.model import JobState

    named = [s.strip().upper() for s in query.get("state", "").split(",") if s.strip()]
    for s in named:
        if s not in JobState.__members__:
            raise _invalid(f"--state {s}: unknown state; states: {', '.join(JobState.__members__)}")
    return frozenset(named), query.get("queue") or None, _flag(query, "history")


LIST_LIMIT = 100  # rows per page when a listing names no limit
LIST_MAX = 1000  # the most rows one page holds
LIST_SORTS = ("id", "submit", "state", "priority")
_CURSOR_MAX = 512


class ListParams:
    """`GET /v1/jobs`'s query, read: the filter, the sort and the page asked for.

    `states` are state names (empty: the active ones, or every one with `history`);
    `descending` is None when the query named no order (each sort has its default)."""

    __slots__ = (
        "array",
        "cursor",
        "descending",
        "history",
        "limit",
        "name",
        "parent",
        "queue",
        "sort",
        "states",
        "user",
    )

    def __init__(
        self,
        *,
        states: frozenset[str],
        history: bool,
        queue: str | None = None,
        user: str | None = None,
        name: str | None = None,
        array: bool | None = None,
        parent: int | None = None,
        sort: str = "id",
        descending: bool | None = None,
        limit: int = LIST_LIMIT,
        cursor: str | None = None,
    ) -> None:
        self.states = states
        self.history = history
        self.queue = queue
        self.user = user
        self.name = name
        self.array = array
        self.parent = parent
        self.sort = sort
        self.descending = descending
        self.limit = limit
        self.cursor = cursor


def list_params(query: Mapping[str, str]) -> ListParams:
    """`GET /v1/jobs`'s whole query (`list_query`'s filters, plus user, name, array, parent, sort,
    order, limit and cursor); a bad value is an InvalidRequest naming it."""
    states, queue, history = list_query(query)
    sort = query.get("sort") or "id"
    if sort not in LIST_SORTS:
        raise _invalid(f"sort={sort!r}: want one of {', '.join(LIST_SORTS)}")
    order = query.get("order") or None
    if order not in (None, "asc", "desc"):
        raise _invalid(f"order={order!r}: want asc or desc")
    limit = _whole(query, "limit", LIST_LIMIT)
    if not 1 <= limit <= LIST_MAX:
        raise _invalid(f"limit={limit}: want 1 to {LIST_MAX} rows per page")
    cursor = query.get("cursor") or None
    if cursor is not None and len(cursor) > _CURSOR_MAX:
        raise _invalid("cursor: not a cursor this server made (too long)")
    parent = None
    if query.get("parent"):
        parent = _whole(query, "parent", 0)
        if parent < 1:
            raise _invalid(f"parent={parent}: want a job id")
    array_text = query.get("array")
    array = None
    if array_text is not None:
        if array_text not in ("1", "true", "0", "false"):
            raise _invalid(f"array={array_text!r}: want 1 (only arrays) or 0 (no arrays)")
        array = array_text in ("1", "true")
    return ListParams(
        states=states,
        history=history,
        queue=queue,
        user=query.get("user") or None,
        name=query.get("name") or None,
        array=array,
        parent=parent,
        sort=sort,
        descending=None if order is None else order == "desc",
        limit=limit,
        cursor=cursor,
    )


def logs_query(query: Mapping[str, str]) -> tuple[int, int | None, bool]:
    """`GET /v1/jobs/{id}/logs`'s query as (after, tail or None, follow)."""
    tail = _whole(query, "tail", 0) if "tail" in query else None
    return _whole(query, "after", 0), tail, _flag(query, "follow")


def wait_timeout(query: Mapping[str, str], limit: float = 300.0) -> float:
    """`GET /v1/jobs/{id}/wait`'s timeout in seconds (default 30), at most `limit`."""
    text = query.get("timeout", "30")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):  # NaN too
        raise _invalid(f"timeout={text!r}: want seconds from 0 to {limit:g}, e.g. 30 or 0.5")
    return min(seconds, limit)


def _whole(query: Mapping[str, str], key: str, default: int) -> int:
    text = query.get(key)
    if text is None:
        return default
    try:
        n = int(text)
    except ValueError:
        n = -1
    if not 0 <= n <= _QUERY_MAX:
        raise _invalid(f"{key}={text!r}: want a whole number from 0 to {_QUERY_MAX}")
    return n


# The largest number a query takes (log seqs, tails, page sizes): far above any real one.
_QUERY_MAX = 2**63 - 1


def _flag(query: Mapping[str, str], key: str) -> bool:
    return query.get(key) in ("1", "true")


def blob_digest(function: str, hash_: str, size: str) -> Digest:
    """The digest a `/v1/cas/blobs/{fn}/{hash}/{size}` path names."""
    from rbs.model import Digest, DigestFunction

    try:
        fn = DigestFunction.parse(function)
        if not size.isdigit():
            raise ValueError(f"blob size {size!r}: want a whole number of bytes")
        return Digest(function=fn, hash=hash_, size=int(size))
    except ValueError as e:
        raise _invalid(str(e)) from None


def missing_request(body: Any) -> list[Digest]:
    """A `POST /v1/cas/missing` body as the digests it asks about."""
    texts = body.get("digests") if isinstance(body, dict) else None
    if not isinstance(texts, list):
        raise _invalid('want {"digests": ["blake3:HASH/SIZE", ...]}')
    return [_digest(str(t), f"digests[{i}]") for i, t in enumerate(texts)]


def batch_request(data: bytes) -> list[tuple[Digest, bytes]]:
    """A `POST /v1/cas/batch` body as (digest, bytes) pairs; the sizes must add up."""
    import json

    head, sep, rest = data.partition(b"\n")
    if not sep:
        raise _invalid("batch body: want a JSON list of digests, a newline, the bytes")
    try:
        texts = json.loads(head)
    except ValueError as e:
        raise _invalid(f"batch body: the first line is not JSON: {e}") from None
    if not isinstance(texts, list):
        raise _invalid("batch body: the first line must be a JSON list of digests")
    digests = [_digest(str(t), f"batch digests[{i}]") for i, t in enumerate(texts)]
    named = sum(d.size for d in digests)
    if named != len(rest):
        raise _invalid(f"batch body holds {len(rest)} bytes, the digests name {named}")
    out: list[tuple[Digest, bytes]] = []
    offset = 0
    for d in digests:
        out.append((d, rest[offset : offset + d.size]))
        offset += d.size
    return out
