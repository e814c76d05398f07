"""Runs an action graph: dependency order, `-j N` threads, caches, early cutoff, rbs-out/.

Per action, cheapest first: (1) the memo in the incremental state maps a signature of
the action and its input digests to its outputs, so an unchanged action costs a hash
and a few stats; (2) otherwise the action becomes a REAPI Action in the store and the
action cache is asked; (3) otherwise the runner executes it. Because outputs are
compared by digest, an action that reproduces the same bytes stops the rebuild from
spreading to its dependents (early cutoff).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from rbs.build.graph import BIN_DIR, EXEC_BIN_DIR, HOST_BIN_DIR, ActionGraph, ActionSpec
from rbs.build.state import BuildState, StatKey, out_key, signature
from rbs.model import Digest, DigestFunction

_SIGNAL_CHECK_S = 0.5  # how long Ctrl-C may wait when another thread received it

log = logging.getLogger(__name__)
OUT_BIN = "rbs-out/bin"
OUT_HOST_BIN = "rbs-out/host/bin"
OUT_EXEC_BIN = "rbs-out/exec/bin"


def out_path(exec_path: str) -> str:
    """Where a generated file appears in the workspace: rbs-out/bin/<short path>, or
    rbs-out/host/bin/... and rbs-out/exec/bin/... for tools of those configurations."""
    if exec_path.startswith(HOST_BIN_DIR + "/"):
        return OUT_HOST_BIN + exec_path[len(HOST_BIN_DIR) :]
    if exec_path.startswith(EXEC_BIN_DIR + "/"):
        return OUT_EXEC_BIN + exec_path[len(EXEC_BIN_DIR) :]
    return OUT_BIN + exec_path[len(BIN_DIR) :]


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    spec: ActionSpec
    message: str


@dataclass(slots=True)
class Report:
    """What one execution did."""

    total: int = 0
    executed: int = 0
    cache_hits: int = 0
    memo_hits: int = 0
    hashed: int = 0  # source files whose content was hashed (stat data changed)
    failures: list[Failure] = field(default_factory=list)
    tests: dict[int, tuple[int, bool, bytes]] = field(
        default_factory=dict
    )  # idx -> (exit, cached, log)
    digests: dict[str, tuple[Digest, bool]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


class Listener:
    """Progress callbacks (the terminal display implements them)."""

    def start(self, total: int) -> None: ...
    def action_started(self, spec: ActionSpec) -> None: ...
    def action_finished(self, spec: ActionSpec, *, how: str) -> None: ...
    def failure(self, failure: Failure) -> None: ...
    def finish(self, report: Report) -> None: ...


def needed_actions(
    graph: ActionGraph, paths: Iterable[str], *, tests: Iterable[int] = ()
) -> list[int]:
    """Indices of the actions that create `paths` (and their inputs), plus `tests`."""
    producer = graph.producer()
    todo = [producer[p] for p in paths if p in producer] + list(tests)
    seen: set[int] = set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        a = graph.actions[i]
        todo.extend(producer[p] for p in a.inputs if p in producer)
    return sorted(seen)


class Engine:
    """Executes part of an action graph; one instance per build."""

    def __init__(
        self,
        root: Path,
        state: BuildState,
        backend: Callable[[], Backend],
        *,
        jobs: int,
        keep_going: bool = False,
        listener: Listener | None = None,
        test_timeout: int = 0,
    ) -> None:
        self.root = root
        self.state = state
        self._backend_factory = backend
        self._backend: Backend | None = None
        self.jobs = max(1, jobs)
        self.keep_going = keep_going
        self.listener = listener or Listener()
        self.test_timeout = test_timeout
        self._lock = threading.Lock()
        self._made_dirs: set[str] = set()

    @property
    def backend(self) -> Backend:
        # The store, protobuf and the runner load only when some action misses the memo.
        with self._lock:
            if self._backend is None:
                self._backend = self._backend_factory()
            return self._backend

    def run(self, graph: ActionGraph, indices: list[int]) -> Report:
        report = Report(total=len(indices))
        producer = graph.producer()
        wanted = set(indices)
        deps: dict[int, set[int]] = {}
        users: dict[int, list[int]] = {i: [] for i in indices}
        for i in indices:
            a = graph.actions[i]
            ds = {producer[p] for p in a.inputs if p in producer} & wanted
            deps[i] = ds
            for d in ds:
                users[d].append(i)
        self.listener.start(len(indices))
        ready = [i for i in indices if not deps[i]]
        blocked: set[int] = set()
        running: dict[Future[tuple[str, str]], int] = {}
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            try:
                self._loop(graph, pool, ready, running, deps, users, blocked, report)
            except BaseException:
                # Ctrl-C or a crash: stop what runs now instead of waiting for it.
                ready.clear()
                for fut in running:
                    fut.cancel()
                if self._backend is not None:
                    self._backend.abort()
                raise
        if self._backend is not None:
            self._backend.close()
        self.listener.finish(report)
        return report

    def _loop(
        self,
        graph: ActionGraph,
        pool: ThreadPoolExecutor,
        ready: list[int],
        running: dict[Future[tuple[str, str]], int],
        deps: dict[int, set[int]],
        users: dict[int, list[int]],
        blocked: set[int],
        report: Report,
    ) -> None:
        digests = report.digests
        stop = False
        # At most a few actions per thread wait in the pool: `wait` below looks at every
        # running future, so an unbounded pool queue made a large build quadratic.
        cap = 4 * self.jobs
        while ready or running:
            while ready and not stop and len(running) < cap:
                i = ready.pop()
                spec = graph.actions[i]
                checked = self._check(spec, digests)
                if isinstance(checked, tuple):
                    # Unchanged: settled here, without a trip through the thread pool.
                    self._memo_hit(spec, checked, digests, report, i)
                    self.listener.action_finished(spec, how="memo")
                    for u in users[i]:
                        deps[u].discard(i)
                        if not deps[u] and u not in blocked:
                            ready.append(u)
                    continue
                running[pool.submit(self._one, spec, checked, digests, report, i)] = i
            if not running:
                break
            # With a timeout: a Ctrl-C the kernel hands to a worker thread (busy in a
            # select()) only sets Python's flag, and the main thread sees it when it runs.
            done, _ = wait(running, timeout=_SIGNAL_CHECK_S, return_when=FIRST_COMPLETED)
            for fut in done:
                i = running.pop(fut)
                spec = graph.actions[i]
                exc = fut.exception()
                if exc is not None:
                    how, msg = "failed", f"{type(exc).__name__}: {exc}"
                else:
                    how, msg = fut.result()
                if how == "failed":
                    f = Failure(spec=spec, message=msg)
                    report.failures.append(f)
                    self.listener.failure(f)
                    self._block(i, users, blocked)
                    if not self.keep_going:
                        stop = True
                    continue
                self.listener.action_finished(spec, how=how)
                for u in users[i]:
                    deps[u].discard(i)
                    if not deps[u] and u not in blocked:
                        ready.append(u)
            if stop:
                ready.clear()

    def _block(self, i: int, users: dict[int, list[int]], blocked: set[int]) -> None:
        todo = list(users[i])
        while todo:
            u = todo.pop()
            if u not in blocked:
                blocked.add(u)
                todo.extend(users[u])

    def _input_digest(
        self, path: str, digests: dict[str, tuple[Digest, bool]]
    ) -> tuple[Digest, bool]:
        have = digests.get(path)
        if have is not None:
            return have
        h, size, exe = self.state.stats.digest(self.root, path)
        d = Digest(function=DigestFunction.BLAKE3, hash=h, size=size)
        with self._lock:
            digests[path] = (d, exe)
        return d, exe

    def _check(
        self, spec: ActionSpec, digests: dict[str, tuple[Digest, bool]]
    ) -> _ChangedAction | tuple[str, tuple[tuple[str, str, bool], ...]] | str:
        """The memo entry if the action is unchanged, else what running it needs
        (or a failure message when an input is gone)."""
        if spec.is_test and self.test_timeout:
            spec = dataclasses.replace(spec, timeout_s=self.test_timeout)
        try:
            inputs = {p: self._input_digest(p, digests) for p in spec.inputs}
        except FileNotFoundError as e:
            return f"missing input {e.filename}: it was deleted after analysis; build again"
        sig = signature(
            [
                repr(spec),
                *(f"{p}={d.hash}/{d.size}/{int(x)}" for p, (d, x) in sorted(inputs.items())),
            ]
        )
        memo = self.state.memo.get(sig)
        if memo is not None and self._outputs_intact(memo):
            return sig, memo
        return _ChangedAction(spec=spec, inputs=inputs, sig=sig)

    def _memo_hit(
        self,
        spec: ActionSpec,
        hit: tuple[str, tuple[tuple[str, str, bool], ...]],
        digests: dict[str, tuple[Digest, bool]],
        report: Report,
        idx: int,
    ) -> None:
        sig, memo = hit
        with self._lock:
            self.state.memo[sig] = self.state.memo.pop(sig, memo)  # most recently used last
            for path, text, exe in memo:
                digests[path] = (Digest.parse(text), exe)
            report.memo_hits += 1
            if spec.is_test:
                report.tests[idx] = (0, True, b"")

    def _one(
        self,
        spec: ActionSpec,
        pending: _ChangedAction | str,
        digests: dict[str, tuple[Digest, bool]],
        report: Report,
        idx: int,
    ) -> tuple[str, str]:
        """Run (or fetch from the action cache) one changed action; (how, failure)."""
        if isinstance(pending, str):
            return "failed", pending
        spec, inputs, sig = pending.spec, pending.inputs, pending.sig
        self.listener.action_started(spec)
        outcome = self.backend.bring_up_to_date(spec, inputs)
        log.debug(
            "%s: %s", spec.describe(), outcome.error or ("cached" if outcome.cached else "ran")
        )
        if outcome.error:
            if spec.is_test:
                with self._lock:
                    report.tests[idx] = (outcome.exit_code, False, outcome.log)
                return "test-failed", ""
            return "failed", outcome.error
        produced = tuple((o.path, str(o.digest), o.executable) for o in outcome.outputs)
        for path, text, exe in produced:
            self._publish(path, Digest.parse(text), exe, is_dir=path in spec.output_dirs)
        with self._lock:
            for path, text, exe in produced:
                digests[path] = (Digest.parse(text), exe)
            self.state.memo[sig] = produced
            if outcome.cached:
                report.cache_hits += 1
            else:
                report.executed += 1
            if spec.is_test:
                report.tests[idx] = (0, outcome.cached, outcome.log)
        return ("cached" if outcome.cached else "executed"), ""

    def _outputs_intact(self, memo: tuple[tuple[str, str, bool], ...]) -> bool:
        # A memo entry names files under rbs-out/; their stat data proves they were not
        # touched since we published them (hardlinks into the store, read-only).
        for path, text, _exe in memo:
            rel = out_path(path)
            k = self.state.published.get(rel)
            if k is None:
                return False
            if self.state.published_digest.get(rel, text) != text:
                return False  # another action (another configuration) wrote it since
            now = out_key(self.root / rel)
            if now != k and not self._retouched(rel, text, k, now):
                return False
        return True

    def _retouched(self, rel: str, text: str, was: StatKey, now: StatKey | None) -> bool:
        """True when only the mtime of a published output changed and its bytes are
        still the digest's: the store refreshes the mtime of a blob it serves (a lease
        for eviction), and the output is a hardlink of that blob. Its new stat data is
        recorded, so the bytes are read once per refresh."""
        if now is None or now[1:] != was[1:]:
            return False
        digest = Digest.parse(text)
        if digest.function is not DigestFunction.BLAKE3:
            return False
        h = blake3.blake3()
        try:
            with open(self.root / rel, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except OSError:
            return False
        if h.hexdigest() != digest.hash:
            return False
        with self._lock:
            self.state.published[rel] = now
        return True

    def _publish(
        self, exec_path: str, digest: Digest, executable: bool, *, is_dir: bool = False
    ) -> None:
        rel = out_path(exec_path)
        dest = self.root / rel
        parent = str(dest.parent)
        if is_dir:
            # A tree artifact: laid out whole under rbs-out/, replacing an older one.
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.backend.export_tree(digest, dest)
            with self._lock:
                self.state.published[rel] = out_key(dest)
            return
        if parent not in self._made_dirs:
            dest.parent.mkdir(parents=True, exist_ok=True)
            self._made_dirs.add(parent)
        try:
            # First build: link straight into place (one system call).
            self.backend.export(digest, dest, executable)
        except FileExistsError:
            # Replace an older output atomically, never leaving a half-written file.
            tmp = dest.with_name(f".{dest.name}.rbs-tmp-{os.getpid()}-{threading.get_ident()}")
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            self.backend.export(digest, tmp, executable)
            os.replace(tmp, dest)
        with self._lock:
            self.state.published[rel] = out_key(dest)
            self.state.published_digest[rel] = str(digest)


@dataclass(frozen=True, slots=True, kw_only=True)
class _ChangedAction:
    """A changed action with its input digests and memo signature."""

    spec: ActionSpec
    inputs: dict[str, tuple[Digest, bool]]
    sig: str


class Backend:
    """The store-side half of execution (imported lazily; see backend.py)."""

    def bring_up_to_date(
        self, spec: ActionSpec, inputs: dict[str, tuple[Digest, bool]]
    ) -> BackendOutcome:
        raise NotImplementedError

    def export(self, digest: Digest, dest: Path, executable: bool) -> None:
        raise NotImplementedError

    def export_tree(self, root: Digest, dest: Path) -> None:
        """Lay out a stored directory (a tree artifact) at dest."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the build is done."""

    def abort(self) -> None:
        """Called instead of close() when the build is interrupted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendOutcome:
    """What bringing one action up to date gave: its outputs (run or cached), or an error."""

    outputs: tuple[OutputRef, ...] = ()
    cached: bool = False
    error: str = ""
    exit_code: int = 0
    log: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputRef:
    path: str
    digest: Digest
    executable: bool
    is_dir: bool = False  # a tree artifact: digest is its root Directory
