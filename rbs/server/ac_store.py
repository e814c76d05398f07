"""The action cache's SQLite store: serialized ActionResults keyed by instance and action digest.

One table in `<data_dir>/action_cache.db`, WAL journal, `synchronous=NORMAL`: a
committed update survives a server crash or restart (the WAL is on disk before the
RPC answers); only an OS crash or power loss may drop the last few updates, which the
cache tolerates (a lost entry is a miss). Values are the ActionResult bytes exactly as
received, so the store knows nothing of protobuf.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from rbs.model import Digest

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS action_results (
    instance    TEXT    NOT NULL,
    function    TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    size        INTEGER NOT NULL,
    result      BLOB    NOT NULL,
    updated_at  REAL    NOT NULL,
    PRIMARY KEY (instance, function, hash, size)
) WITHOUT ROWID;
"""


class SchemaError(RuntimeError):
    """The database was written by a newer rbs."""


def open_store_db(path: Path, schema: str, version: int) -> sqlite3.Connection:
    """One of the server's small SQLite stores: WAL, `synchronous=NORMAL`, one connection
    shared by threads under the caller's lock, SCHEMA applied, a newer VERSION refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA busy_timeout=5000")
    found = db.execute("PRAGMA user_version").fetchone()[0]
    if found > version:
        raise SchemaError(
            f"{path} has schema version {found}, newer than this rbs understands "
            f"({version}); upgrade rbs or point --data-dir elsewhere"
        )
    db.executescript(schema)
    if found != version:  # only when new: a full disk must not stop a restart
        db.execute(f"PRAGMA user_version={version}")
    return db


class ActionResultStore:
    """get/put/delete of serialized ActionResults; safe to call from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_store_db(self.path, _SCHEMA, _SCHEMA_VERSION)

    @staticmethod
    def _key(instance: str, digest: Digest) -> tuple[str, str, str, int]:
        return (instance, digest.function.value, digest.hash, digest.size)

    def get(self, instance: str, digest: Digest) -> bytes | None:
        with self._lock:
            row = self._db.execute(
                "SELECT result FROM action_results "
                "WHERE instance=? AND function=? AND hash=? AND size=?",
                self._key(instance, digest),
            ).fetchone()
        return bytes(row[0]) if row else None

    def put(self, instance: str, digest: Digest, result: bytes) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO action_results "
                "(instance, function, hash, size, result, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                (*self._key(instance, digest), result, time.time()),
            )

    def delete(self, instance: str, digest: Digest) -> bool:
        with self._lock:
            cur = self._db.execute(
                "DELETE FROM action_results WHERE instance=? AND function=? AND hash=? AND size=?",
                self._key(instance, digest),
            )
        return cur.rowcount > 0

    def count(self) -> int:
        with self._lock:
            n: int = self._db.execute("SELECT COUNT(*) FROM action_results").fetchone()[0]
        return n

    def close(self) -> None:
        with self._lock:
            self._db.close()
