"""Action runners and the local action cache: where a prepared REAPI action executes.

`ActionRunner` is the seam for remote execution: the local runner below and a remote
REAPI runner take the same `PreparedAction` (whose Command, Action and input root are
already in the store) and return an `ExecResult` whose outputs are in the store.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path

from rbs.build.execroot import ExecRoot
from rbs.build.protos import re_pb2
from rbs.build.reapi import ExecResult, OutputFile, PreparedAction, from_result, to_result
from rbs.build.trees import OutputDir, store_output_dir
from rbs.cas.store import BlobStore
from rbs.cas.tree import TreeEntry, materialize
from rbs.model import Digest

_seq = itertools.count()


class ActionResultCache(ABC):
    """The build's view of an action cache: Action digest -> ActionResult, for successful
    actions only (local: `LocalActionCache`; remote: rbs.client.remote_runner)."""

    @abstractmethod
    def get(self, action: PreparedAction) -> ExecResult | None: ...

    @abstractmethod
    def put(self, action: PreparedAction, result: ExecResult) -> None: ...


class LocalActionCache(ActionResultCache):
    """One file per entry, `<root>/<hh>/<hash>`, holding the serialized ActionResult.

    A hit counts only if every output blob is still in the store (the store may evict).
    """

    def __init__(self, root: Path, store: BlobStore) -> None:
        self.root = root
        self.store = store
        self._made: set[str] = set()  # shard folders known to exist

    def _path(self, d: Digest) -> Path:
        return self.root / d.hash[:2] / d.hash

    def get(self, action: PreparedAction) -> ExecResult | None:
        try:
            data = self._path(action.digest).read_bytes()
        except FileNotFoundError:
            return None
        ar = re_pb2.ActionResult()
        try:
            ar.ParseFromString(data)
        except Exception:  # a torn or foreign file is a miss, never an error
            return None
        res = from_result(ar, action.spec.working_directory, cached=True)
        if self.store.find_missing([o.digest for o in res.outputs] + [d.tree for d in res.dirs]):
            return None
        return res

    def put(self, action: PreparedAction, result: ExecResult) -> None:
        path = self._path(action.digest)
        if path.parent.name not in self._made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._made.add(path.parent.name)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp.")
        with os.fdopen(fd, "wb") as f:
            f.write(
                to_result(result, action.spec.working_directory).SerializeToString(
                    deterministic=True
                )
            )
        os.replace(tmp, path)


class ActionRunner(ABC):
    """Executes prepared actions; outputs end up in the store."""

    @abstractmethod
    def execute(self, action: PreparedAction) -> ExecResult: ...

    def close(self) -> None:  # noqa: B027 (optional hook; most runners hold nothing)
        """Release resources (connections, sandboxes)."""


class LocalRunner(ActionRunner):
    """Runs each action in a fresh sandbox folder that holds only its declared inputs."""

    def __init__(
        self,
        store: BlobStore,
        sandbox_root: Path,
        *,
        exec_root_name: str = "__main__",
        keep_sandboxes: bool = False,
    ) -> None:
        self.store = store
        # Bazel's exec root is `.../execroot/<workspace name>`; a command that prints its
        # working folder sees the same last component here.
        self.exec_root_name = exec_root_name
        self.sandbox_root = sandbox_root
        self.keep = keep_sandboxes
        _ABORTED.clear()  # a new build in this process starts un-aborted
        sandbox_root.mkdir(parents=True, exist_ok=True)
        # Finished sandboxes are deleted by one background thread, off the critical path.
        self._trash: queue.SimpleQueue[Path | None] = queue.SimpleQueue()
        self._cleaner: threading.Thread | None = None
        # Exec roots are reused between actions (see execroot.py); these are free now.
        self._idle: list[ExecRoot] = []
        self._lock = threading.Lock()

    def execute(self, action: PreparedAction) -> ExecResult:
        if action.entries is None or self.keep:
            box = Path(
                tempfile.mkdtemp(prefix=f"{os.getpid()}-{next(_seq)}-", dir=self.sandbox_root)
            )
            try:
                exec_root = box / "execroot" / self.exec_root_name
                if action.entries is not None:
                    self._link_inputs(action.entries, exec_root)
                else:
                    materialize(self.store, action.input_root, exec_root, link=True)
                return self._run(action, exec_root, box)
            finally:
                if not self.keep:
                    self._discard(box)
        root = self._acquire()
        reusable = False
        try:
            root.populate(action.entries)
            result = self._run(action, root.exec_root, root.tmp)
            reusable = root.reset()
            return result
        finally:
            if reusable:
                with self._lock:
                    self._idle.append(root)
            else:
                self._discard(root.box)

    def _acquire(self) -> ExecRoot:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ExecRoot(self.sandbox_root, self.exec_root_name, self.store)

    def _discard(self, box: Path) -> None:
        if self._cleaner is None:
            self._cleaner = threading.Thread(
                target=self._clean, name="rbs-sandbox-cleaner", daemon=True
            )
            self._cleaner.start()
        self._trash.put(box)

    def _clean(self) -> None:
        while (box := self._trash.get()) is not None:
            shutil.rmtree(box, ignore_errors=True)

    def close(self) -> None:
        """Delete the idle sandboxes; wait until every finished sandbox is deleted."""
        with self._lock:
            idle, self._idle = self._idle, []
        for root in idle:
            self._discard(root.box)
        if self._cleaner is not None:
            self._trash.put(None)
            self._cleaner.join()
            self._cleaner = None

    def _link_inputs(self, entries: Mapping[str, TreeEntry | None], exec_root: Path) -> None:
        """Lay out the input root from the flat map `prepare` kept (same content as the
        stored tree), creating each folder once."""
        exec_root.mkdir(parents=True, exist_ok=True)
        made: set[str] = {""}
        for rel in sorted(entries):
            entry = entries[rel]
            parent = rel.rpartition("/")[0] if entry is not None else rel
            if parent not in made:
                os.makedirs(exec_root / parent, exist_ok=True)
                p = parent
                while p and p not in made:
                    made.add(p)
                    p = p.rpartition("/")[0]
            if entry is None:
                continue
            if entry.symlink is not None:
                os.symlink(entry.symlink, exec_root / rel)
            else:
                assert entry.digest is not None
                self.store.export_file(
                    entry.digest, exec_root / rel, executable=entry.executable, link=True
                )

    def _run(self, action: PreparedAction, exec_root: Path, tmp: Path) -> ExecResult:
        cmd = action.command
        cwd = exec_root / cmd.working_directory if cmd.working_directory else exec_root
        env = {e.name: e.value for e in cmd.environment_variables}
        # A private TMPDIR, emptied (or deleted) with the sandbox.
        env.setdefault("TMPDIR", str(tmp))
        limit = action.action.timeout.seconds or None
        try:
            code, out, err = _run_process(list(cmd.arguments), cwd, env, limit)
        except OSError as e:
            code, out, err = 127, b"", f"cannot start {cmd.arguments[0]!r}: {e}\n".encode()
        outputs: list[OutputFile] = []
        missing: list[str] = []
        for rel in cmd.output_files:
            p = cwd / rel
            full = f"{cmd.working_directory}/{rel}" if cmd.working_directory else rel
            if not p.is_file() or (p.is_symlink() and not p.exists()):
                missing.append(full)
                continue
            executable = os.access(p, os.X_OK)
            # In the action's function: under --remote-cache-only that is the server's.
            digest = self.store.put_file(p, function=action.digest.function)
            outputs.append(OutputFile(path=full, digest=digest, executable=executable))
        dirs: list[OutputDir] = []
        for rel in cmd.output_directories:
            p = cwd / rel
            full = f"{cmd.working_directory}/{rel}" if cmd.working_directory else rel
            if p.is_symlink() or not p.is_dir():
                missing.append(full)
                continue
            dirs.append(store_output_dir(self.store, p, full, action.digest.function))
        return ExecResult(
            exit_code=code,
            outputs=tuple(outputs),
            stdout=out,
            stderr=err,
            missing=tuple(missing),
            dirs=tuple(dirs),
        )


TIMEOUT_EXIT = 124  # what `timeout(1)` exits with; REAPI's DEADLINE_EXCEEDED locally


_LIVE: set[int] = set()  # process groups of running actions, killed on abort
_LIVE_LOCK = threading.Lock()
_ABORTED = threading.Event()


def kill_running() -> None:
    """Kill every action process group still running (Ctrl-C, or an aborted build), and
    any that registers later: a child can start before its thread records it."""
    with _LIVE_LOCK:
        _ABORTED.set()
        groups = list(_LIVE)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _run_process(
    argv: list[str], cwd: Path, env: dict[str, str], limit: float | None
) -> tuple[int, bytes, bytes]:
    """Run in a new session so that a timeout or an abort kills the whole process group."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    ) as proc:
        with _LIVE_LOCK:
            _LIVE.add(proc.pid)
            if _ABORTED.is_set():
                os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return (
                TIMEOUT_EXIT,
                out,
                err + f"\nrbs: killed after the {limit:.0f} s time limit\n".encode(),
            )
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(proc.pid)
        return proc.returncode, out, err


def remove_tree(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
