"""Build invocations, as the Build Event Service records them: one row per invocation in
<data_dir>/invocations.db.

`rbs.server.bes_service` folds a Bazel event stream into an invocation document (a plain
dict: command, targets, timing, exit code, actions, failures, tests, console output) and
saves it here while the stream runs; the dashboard's Invocations pages read it back. The
store keeps the newest MAX_KEPT invocations and forgets older ones."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from rbs.server.ac_store import open_store_db

MAX_KEPT = 10_000
_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS invocations (
    id TEXT PRIMARY KEY,
    started REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS invocations_started ON invocations (started);
"""

# The columns of the list page, read from each document.
SUMMARY_KEYS = (
    "id",
    "tool",
    "command",
    "targets",
    "started",
    "finished",
    "exit_code",
    "exit_name",
    "actions_executed",
    "cache_hits",
    "failures",
    "tests",
)


class InvocationStore:
    """put/get/recent of invocation documents; safe to call from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_store_db(self.path, _SCHEMA, _SCHEMA_VERSION)
        self._puts = 0

    def put(self, doc: dict[str, Any]) -> None:
        """Save (or replace) the invocation `doc["id"]`."""
        inv_id = str(doc["id"])
        if not inv_id:
            raise ValueError("an invocation needs an id")
        text = json.dumps(doc, separators=(",", ":"))
        with self._lock:
            self._db.execute(
                "INSERT INTO invocations (id, started, doc) VALUES (?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET started=excluded.started, doc=excluded.doc",
                (inv_id, float(doc.get("started") or 0.0), text),
            )
            self._puts += 1
            if self._puts % 100 == 1:
                self._trim()

    def _trim(self) -> None:
        self._db.execute(
            "DELETE FROM invocations WHERE id IN (SELECT id FROM invocations "
            "ORDER BY started DESC LIMIT -1 OFFSET ?)",
            (MAX_KEPT,),
        )

    def get(self, inv_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT doc FROM invocations WHERE id=?", (inv_id,)).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def recent(self, limit: int = 100, before: float | None = None) -> list[dict[str, Any]]:
        """The newest `limit` invocations (started before `before`, when given), newest first,
        each as its summary: SUMMARY_KEYS, with failures and tests as counts."""
        sql = "SELECT doc FROM invocations"
        args: tuple[Any, ...] = ()
        if before is not None:
            sql += " WHERE started < ?"
            args = (before,)
        sql += " ORDER BY started DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, int(limit))).fetchall()
        out = []
        for (text,) in rows:
            doc = json.loads(text)
            summary = {k: doc.get(k) for k in SUMMARY_KEYS}
            summary["failures"] = len(doc.get("failures") or [])
            tests = doc.get("tests") or []
            summary["tests"] = len(tests)
            summary["tests_failed"] = sum(1 for t in tests if t.get("status") != "PASSED")
            out.append(summary)
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()
