"""Long-running REAPI operations: an in-memory registry with watchers, kept in SQLite.

Every Execute creates or joins one operation (`operations/{uuid}`). Callers that
execute the same action (same digest and digest function) while it is in flight join
the same operation and see the same updates. Each change is written to SQLite (WAL)
before watchers see it, so a restarted server still knows every operation in flight
(it re-queues them) and can answer WaitExecution for recently finished ones.
"""

from __future__ import annotations

import asyncio
import enum
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

from rbs.model import Digest, DigestFunction

# Finished operations stay answerable by WaitExecution this long.
KEEP_DONE_S = 3600.0


class Stage(enum.IntEnum):
    """REAPI ExecutionStage values."""

    UNKNOWN = 0
    CACHE_CHECK = 1
    QUEUED = 2
    EXECUTING = 3
    COMPLETED = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    """One execution as clients see it. `response` is a serialized ExecuteResponse,
    present once the operation is done (kept as bytes: it is only ever relayed)."""

    name: str
    action_digest: Digest
    stage: Stage
    instance: str = ""
    skip_cache_lookup: bool = False
    attempt: int = 1
    worker_id: str = ""
    lease_id: str = ""
    response: bytes | None = None
    created: float = 0.0
    updated: float = 0.0

    @property
    def done(self) -> bool:
        return self.stage is Stage.COMPLETED


class UnknownOperation(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"operation {name!r} is unknown: it finished more than {KEEP_DONE_S:g}s ago or "
            "never existed; call Execute again"
        )
        self.name = name


class OperationInFlight(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"operation {name!r} is still running: cancel it (CancelOperation) or wait "
            "for it to finish before deleting it"
        )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS operations (
    name TEXT PRIMARY KEY,
    instance TEXT NOT NULL,
    function TEXT NOT NULL,
    hash TEXT NOT NULL,
    size INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    skip_cache_lookup INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    worker_id TEXT NOT NULL,
    lease_id TEXT NOT NULL,
    response BLOB,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS operations_stage ON operations (stage, updated);
CREATE TABLE IF NOT EXISTS workers (
    worker_id TEXT PRIMARY KEY,
    info TEXT NOT NULL,
    last_seen REAL NOT NULL
);
"""


class OperationStore:
    """SQLite persistence for operations and known workers (one small file)."""

    def __init__(self, path: Path | None) -> None:
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path) if path else ":memory:", isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL is durable across process crashes with WAL; only an OS crash can lose
        # the last transactions, which clients then simply re-execute.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def save(self, op: Operation) -> None:
        d = op.action_digest
        self._db.execute(
            "INSERT OR REPLACE INTO operations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                op.name,
                op.instance,
                d.function.value,
                d.hash,
                d.size,
                int(op.stage),
                int(op.skip_cache_lookup),
                op.attempt,
                op.worker_id,
                op.lease_id,
                op.response,
                op.created,
                op.updated,
            ),
        )

    def load(self, *, keep_done_since: float) -> list[Operation]:
        """Operations in flight, and finished ones updated after `keep_done_since`
        (older finished ones are deleted)."""
        self._db.execute(
            "DELETE FROM operations WHERE stage = ? AND updated < ?",
            (int(Stage.COMPLETED), keep_done_since),
        )
        rows = self._db.execute("SELECT * FROM operations ORDER BY created").fetchall()
        return [
            Operation(
                name=r[0],
                instance=r[1],
                action_digest=Digest(function=DigestFunction(r[2]), hash=r[3], size=r[4]),
                stage=Stage(r[5]),
                skip_cache_lookup=bool(r[6]),
                attempt=r[7],
                worker_id=r[8],
                lease_id=r[9],
                response=r[10],
                created=r[11],
                updated=r[12],
            )
            for r in rows
        ]

    def delete(self, name: str) -> None:
        self._db.execute("DELETE FROM operations WHERE name = ?", (name,))

    def forget_done_before(self, when: float) -> None:
        self._db.execute(
            "DELETE FROM operations WHERE stage = ? AND updated < ?", (int(Stage.COMPLETED), when)
        )

    def save_worker(self, worker_id: str, info_json: str, last_seen: float) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO workers VALUES (?,?,?)", (worker_id, info_json, last_seen)
        )

    def load_workers(self) -> list[tuple[str, str, float]]:
        rows = self._db.execute("SELECT worker_id, info, last_seen FROM workers").fetchall()
        return [(r[0], r[1], r[2]) for r in rows]


class _WatchedOperation:
    __slots__ = ("changed", "op")

    def __init__(self, op: Operation) -> None:
        self.op = op
        self.changed = asyncio.Event()


class OperationRegistry:
    """Operations by name, in-flight operations by action, and change notification."""

    def __init__(self, store: OperationStore) -> None:
        self._store = store
        self._ops: dict[str, _WatchedOperation] = {}
        # (instance, action digest) -> name: identical actions share one execution.
        self._inflight: dict[tuple[str, Digest], str] = {}

    @property
    def store(self) -> OperationStore:
        return self._store

    def restore(self, ops: list[Operation]) -> list[Operation]:
        """Load persisted operations; returns those still in flight (to be re-queued)."""
        pending = []
        for op in ops:
            self._ops[op.name] = _WatchedOperation(op)
            if not op.done:
                self._inflight[op.instance, op.action_digest] = op.name
                pending.append(op)
        return pending

    def get(self, name: str) -> Operation:
        entry = self._ops.get(name)
        if entry is None:
            raise UnknownOperation(name)
        return entry.op

    def inflight(self, instance: str, action_digest: Digest) -> Operation | None:
        name = self._inflight.get((instance, action_digest))
        return self._ops[name].op if name else None

    def in_flight_count(self) -> int:
        return len(self._inflight)

    def of_instance(self, instance: str) -> list[Operation]:
        """Every known operation of `instance`, oldest first."""
        ops = [e.op for e in self._ops.values() if e.op.instance == instance]
        return sorted(ops, key=lambda op: (op.created, op.name))

    def forget(self, name: str) -> None:
        """Drop a finished operation (DeleteOperation); one in flight is refused."""
        entry = self._ops.get(name)
        if entry is None:
            raise UnknownOperation(name)
        if not entry.op.done:
            raise OperationInFlight(name)
        del self._ops[name]
        self._store.delete(name)

    def create(
        self,
        action_digest: Digest,
        *,
        instance: str = "",
        stage: Stage,
        skip_cache_lookup: bool = False,
        response: bytes | None = None,
        persist: bool = True,
    ) -> Operation:
        """A new operation. `persist=False` is for one that is done at birth (a cache
        hit, missing inputs): it is neither stored nor remembered, since a client that
        asks for it again (WaitExecution -> NOT_FOUND) simply calls Execute again,
        and a busy cache must not grow a table of its hits."""
        now = time.time()
        op = Operation(
            name=f"operations/{uuid.uuid4()}",
            instance=instance,
            action_digest=action_digest,
            stage=stage,
            skip_cache_lookup=skip_cache_lookup,
            response=response,
            created=now,
            updated=now,
        )
        if not persist and op.done:
            return op
        self._store.save(op)
        self._ops[op.name] = _WatchedOperation(op)
        if not op.done:
            self._inflight[instance, action_digest] = op.name
        return op

    def update(self, name: str, **changes: object) -> Operation:
        """Apply changes, persist, and wake every watcher. A finished operation is final:
        later updates (a late result from a lost worker) are ignored."""
        entry = self._ops.get(name)
        if entry is None:
            raise UnknownOperation(name)
        if entry.op.done:
            return entry.op
        op = replace(entry.op, updated=time.time(), **changes)  # type: ignore[arg-type]
        self._store.save(op)
        entry.op = op
        if op.done:
            self._inflight.pop((op.instance, op.action_digest), None)
        entry.changed.set()
        entry.changed = asyncio.Event()
        return op

    def complete(self, name: str, response: bytes) -> Operation:
        return self.update(name, stage=Stage.COMPLETED, response=response)

    async def watch(self, name: str, *, keepalive: float = 0.0) -> AsyncIterator[Operation]:
        """Yield the operation now and after every change, until it is done; with
        `keepalive`, also repeat it when nothing changed for that many seconds (long
        actions must not look like dead streams to clients and proxies)."""
        entry = self._ops.get(name)
        if entry is None:
            raise UnknownOperation(name)
        last: Operation | None = None
        while True:
            op = entry.op
            if op is not last:
                yield op
                last = op
            if op.done:
                return
            changed = entry.changed
            if entry.op is not op:
                continue
            if keepalive <= 0:
                await changed.wait()
                continue
            try:
                await asyncio.wait_for(changed.wait(), keepalive)
            except TimeoutError:
                last = None

    def prune(self, *, older_than: float) -> int:
        """Forget finished operations last updated before `older_than`."""
        old = [n for n, e in self._ops.items() if e.op.done and e.op.updated < older_than]
        for n in old:
            del self._ops[n]
        self._store.forget_done_before(older_than)
        return len(old)
