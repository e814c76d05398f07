"""Run one REAPI action in a fresh sandbox and produce its ActionResult.

The steps: read the Action and Command from the store (a worker-local cache that
fetches only what it lacks), materialize the input root, run the arguments with
exactly the Command's environment in its working directory as the leader of a new
process group, enforce the timeout by killing the whole group, then store the
outputs (files, directories as Tree messages, symlinks), stdout and stderr as blobs
and hand every new digest to `upload` so the server's CAS has them before the
result is reported. Output paths follow REAPI: `output_paths` (v2.1+) or the older
`output_files` / `output_directories` (Bazel 4.2 speaks v2.0), relative to the
working directory; outputs the command did not create are simply absent.

Blocking work (materializing, hashing, uploading) runs in threads so a worker's
heartbeats keep flowing while it runs actions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from grpc import StatusCode

from rbs.cas.errors import BlobNotFound, InvalidTree
from rbs.cas.store import BlobStore, BlobWriter
from rbs.cas.tree import collect_directories, tree_from_path
from rbs.executor import runuser
from rbs.executor.runuser import NoFreeUid, RunUsers
from rbs.executor.sandbox import Sandbox, SandboxError, remove_tree, safe_relative
from rbs.model import Digest, DigestFunction
from rbs.wire.actions import (
    ActionInfo,
    ActionResultInfo,
    CommandInfo,
    ExecutionTimes,
    MessageDecodeError,
    OutputDirectoryInfo,
    OutputFileInfo,
    OutputSymlinkInfo,
    action_from_blob,
    command_from_blob,
    tree_blob,
)

log = logging.getLogger(__name__)

Uploader = Callable[[list[Digest]], None]
Prefetcher = Callable[[Digest], None]
Fetcher = Callable[[list[Digest]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionOutcome:
    """What the worker reports: a status code, a message, and the result (also
    partial, e.g. the output of a timed-out action)."""

    code: StatusCode
    message: str = ""
    result: ActionResultInfo = field(default_factory=ActionResultInfo)


class _Recorder(BlobStore):
    """Delegates to a store and remembers every digest stored through it."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.stored: list[Digest] = []

    def contains(self, digest: Digest) -> bool:
        return self.inner.contains(digest)

    def writer(self, expected: Digest) -> BlobWriter:
        return self.inner.writer(expected)

    def _open(self, digest: Digest) -> BinaryIO:
        return self.inner.open(digest)

    def delete(self, digest: Digest) -> bool:
        return self.inner.delete(digest)

    def put(
        self,
        data: bytes,
        *,
        function: DigestFunction = DigestFunction.BLAKE3,
        expected: Digest | None = None,
    ) -> Digest:
        d = self.inner.put(data, function=function, expected=expected)
        self.stored.append(d)
        return d

    def put_file(
        self,
        path: Path,
        *,
        function: DigestFunction = DigestFunction.BLAKE3,
        expected: Digest | None = None,
    ) -> Digest:
        d = self.inner.put_file(path, function=function, expected=expected)
        self.stored.append(d)
        return d


class ActionExecutor:
    """Runs actions from `store` in sandboxes under `work_dir`; see the module docstring."""

    def __init__(
        self,
        store: BlobStore,
        work_dir: Path,
        *,
        output_store: BlobStore | None = None,
        upload: Uploader | None = None,
        prefetch: Prefetcher | None = None,
        fetch: Fetcher | None = None,
        worker_name: str = "",
        link_inputs: bool = True,
        keep_sandboxes: bool = False,
        users: RunUsers | None = None,
    ) -> None:
        self._store = store
        self._users = users  # each action as a uid of its own (rbs.executor.runuser)
        self._output_store = output_store or store
        self._prefetch = prefetch
        self._fetch = fetch
        self._sandboxes = Path(work_dir) / "sandboxes"
        # Finished sandboxes are renamed here and deleted off the action's path.
        self._trash = Path(work_dir) / "sandboxes.trash"
        self._deleting: set[asyncio.Future[None]] = set()
        self._upload = upload
        self._worker_name = worker_name
        self._link = link_inputs
        self._keep = keep_sandboxes

    async def run(
        self, action_digest: Digest, *, name: str, timeout_s: float = 0.0
    ) -> ActionOutcome:
        """Run the action in sandbox `name`. Cancelling the task kills the command."""
        worker_start = time.time_ns()
        try:
            action, command = await asyncio.to_thread(self._load, action_digest)
        except BlobNotFound as e:
            return ActionOutcome(code=StatusCode.FAILED_PRECONDITION, message=str(e))
        except (SandboxError, InvalidTree, MessageDecodeError, ValueError) as e:
            return ActionOutcome(code=StatusCode.INVALID_ARGUMENT, message=str(e))
        timeout = timeout_s or action.timeout_s
        sandbox = Sandbox.create(self._sandboxes, name)
        try:
            fetch_start = time.time_ns()
            try:
                wd = await asyncio.to_thread(self._populate, sandbox, action, command)
            except BlobNotFound as e:
                return ActionOutcome(code=StatusCode.FAILED_PRECONDITION, message=str(e))
            except (SandboxError, InvalidTree) as e:
                return ActionOutcome(code=StatusCode.INVALID_ARGUMENT, message=str(e))
            fetch_completed = time.time_ns()
            try:
                seat = await asyncio.to_thread(self._seat, sandbox)
            except NoFreeUid as e:
                return ActionOutcome(code=StatusCode.RESOURCE_EXHAUSTED, message=str(e))
            execution_start = time.time_ns()
            try:
                exit_code, timed_out = await self._execute(command, wd, sandbox, timeout, seat)
            finally:
                if seat.uid is not None:  # no cgroup: whatever is left of its uid is killed
                    await asyncio.to_thread(seat.give_back, kill=True)
            execution_completed = time.time_ns()
            upload_start = time.time_ns()
            result = await asyncio.to_thread(
                self._collect, command, wd, sandbox, action_digest.function, exit_code
            )
            upload_completed = time.time_ns()
        finally:
            if not self._keep:
                self._discard(sandbox)
        result = dataclasses.replace(
            result,
            execution_metadata=ExecutionTimes(
                worker=self._worker_name,
                worker_start_ns=worker_start,
                input_fetch_start_ns=fetch_start,
                input_fetch_completed_ns=fetch_completed,
                execution_start_ns=execution_start,
                execution_completed_ns=execution_completed,
                output_upload_start_ns=upload_start,
                output_upload_completed_ns=upload_completed,
                worker_completed_ns=time.time_ns(),
            ),
        )
        if timed_out:
            return ActionOutcome(
                code=StatusCode.DEADLINE_EXCEEDED,
                message=f"the action ran longer than its timeout of {timeout:g}s and was killed",
                result=result,
            )
        return ActionOutcome(code=StatusCode.OK, result=result)

    def _discard(self, sandbox: Sandbox) -> None:
        """Free the slot at once: rename the sandbox aside (its process group is already
        dead) and delete it in a thread; deleting took longer than running a small action."""
        gone = self._trash / sandbox.path.name
        try:
            self._trash.mkdir(exist_ok=True)
            os.rename(sandbox.path, gone)
        except OSError:
            gone = sandbox.path
        task = asyncio.ensure_future(asyncio.to_thread(remove_tree, gone))
        self._deleting.add(task)
        task.add_done_callback(self._deleted)

    def _deleted(self, task: asyncio.Future[None]) -> None:
        self._deleting.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not delete a finished sandbox: %s", task.exception())

    def clean_leftovers(self) -> int:
        """Kill process groups and remove sandboxes left by a crashed earlier run."""
        remove_tree(self._trash)
        if not self._sandboxes.is_dir():
            return 0
        n = 0
        for path in sorted(self._sandboxes.iterdir()):
            with contextlib.suppress(FileNotFoundError, ValueError):
                pgid = int((path / "pgid").read_text())
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            Sandbox(path=path).remove()
            n += 1
        if n:
            log.info("removed %d sandbox(es) left by an earlier run", n)
        return n

    # ------------------------------------------------------------------ steps

    def _seat(self, sandbox: Sandbox) -> runuser.Seat:
        """The action's user (none without --run-uids), with its input root and tmp
        folder made its own; hardlinks into the CAS stay the CAS's, read-only."""
        if self._users is None:
            return runuser.Seat(None, str(sandbox.root))
        os.chmod(sandbox.path, 0o711)
        (sandbox.path / "tmp").mkdir(exist_ok=True)
        seat = runuser.Seat(runuser.as_spec(self._users, sandbox.path / "tmp"), str(sandbox.root))
        error = seat.take(lambda line: None)
        if error is not None:
            raise NoFreeUid(error)
        return seat

    def _load(self, digest: Digest) -> tuple[ActionInfo, CommandInfo]:
        if self._fetch is not None:
            self._fetch([digest])
        action = action_from_blob(self._store.get(digest), digest.function)
        if self._fetch is not None:
            self._fetch([action.command_digest])
        command = command_from_blob(self._store.get(action.command_digest))
        if not command.arguments:
            raise SandboxError("the Command has no arguments: nothing to run")
        return action, command

    def _populate(self, sandbox: Sandbox, action: ActionInfo, command: CommandInfo) -> Path:
        root = action.input_root_digest
        for attempt in (1, 2):
            if self._prefetch is not None:
                self._prefetch(root)
            try:
                return sandbox.populate(
                    self._store,
                    root,
                    working_directory=command.working_directory,
                    outputs=_output_paths(command),
                    link=self._link,
                )
            except BlobNotFound:
                # The local cache dropped a blob it found corrupt (say, an earlier action
                # wrote to a hardlinked input): fetch again into a clean sandbox, once.
                if attempt == 2:
                    raise
                remove_tree(sandbox.root)
        raise AssertionError("unreachable")

    async def _execute(
        self, command: CommandInfo, wd: Path, sandbox: Sandbox, timeout: float, seat: runuser.Seat
    ) -> tuple[int, bool]:
        env = dict(command.environment)
        argv = list(command.arguments)
        if seat.uid is not None and self._users is not None and not self._users.private_tmp:
            env.setdefault("TMPDIR", str(sandbox.path / "tmp"))  # /tmp is the host's here
        spawn_argv = seat.wrap(argv)
        with (
            open(sandbox.stdout, "wb", opener=_private) as out,
            open(sandbox.stderr, "wb", opener=_private) as err,
        ):
            # Spawned on the loop (Popen in a thread measured slower: fork/exec keeps the
            # GIL) and awaited through its pidfd, with no child-watcher thread per action.
            try:
                proc = subprocess.Popen(
                    spawn_argv,
                    cwd=wd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except OSError as e:
                # Like a shell: the command could not be started, exit 127 with a reason.
                err.write(
                    f"rbs: cannot run {argv[0]!r} in {command.working_directory or '.'}: {e.strerror}\n".encode()
                )
                return 127, False
            # Recorded so a worker restarted after a crash can kill what it left behind.
            (sandbox.path / "pgid").write_text(f"{proc.pid}\n")
            timed_out = False
            exited = _ExitEvent(proc)
            try:
                await asyncio.wait_for(
                    asyncio.shield(exited.wait()), timeout if timeout > 0 else None
                )
            except TimeoutError:
                timed_out = True
            finally:
                # Kill the whole group: also on timeout or cancellation, and to reap
                # background processes the command left behind.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                try:
                    await asyncio.shield(exited.wait())
                finally:
                    exited.close()
                    proc.wait()
        rc = proc.returncode
        assert rc is not None
        # A signal death reads as 128+N, as in a shell.
        return (128 - rc if rc < 0 else rc), timed_out

    def _collect(
        self,
        command: CommandInfo,
        wd: Path,
        sandbox: Sandbox,
        fn: DigestFunction,
        exit_code: int,
    ) -> ActionResultInfo:
        store = _Recorder(self._output_store)
        stdout = store.put_file(sandbox.stdout, function=fn)
        stderr = store.put_file(sandbox.stderr, function=fn)
        files: list[OutputFileInfo] = []
        symlinks: list[OutputSymlinkInfo] = []
        directories: list[OutputDirectoryInfo] = []
        if command.output_paths:
            wanted: Iterable[tuple[str, str]] = ((p, "any") for p in command.output_paths)
        else:
            wanted = [(p, "file") for p in command.output_files] + [
                (p, "dir") for p in command.output_directories
            ]
        for rel, kind in wanted:
            path = wd / safe_relative(rel, "output path")
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode) and kind == "any":
                symlinks.append(OutputSymlinkInfo(path=rel, target=os.readlink(path)))
                continue
            if stat.S_ISLNK(st.st_mode):
                # v2.0 clients expect the content of a symlinked output, not the link;
                # never of something outside the sandbox (the worker reads as itself).
                if not _inside(path, sandbox.root):
                    continue
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
            if stat.S_ISREG(st.st_mode):
                d = store.put_file(path, function=fn)
                files.append(
                    OutputFileInfo(path=rel, digest=d, is_executable=bool(st.st_mode & 0o111))
                )
            elif stat.S_ISDIR(st.st_mode):
                root = tree_from_path(store, path, function=fn)
                tree = tree_blob(collect_directories(store, root))
                td = store.put(tree, function=fn)
                directories.append(
                    OutputDirectoryInfo(path=rel, tree_digest=td, root_directory_digest=root)
                )
        if self._upload is not None:
            self._upload(sorted(set(store.stored), key=lambda d: d.hash))
        return ActionResultInfo(
            exit_code=exit_code,
            stdout_digest=stdout,
            stderr_digest=stderr,
            output_files=tuple(files),
            output_symlinks=tuple(symlinks),
            output_directories=tuple(directories),
        )


class _ExitEvent:
    """Set when `proc` exits: from its pidfd on the event loop (no thread held), or from
    a thread waiting on it where the kernel has no pidfd (before 5.3)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._fd: int | None = None
        try:
            self._fd = os.pidfd_open(proc.pid)
        except OSError:
            waiter = self._loop.run_in_executor(None, proc.wait)
            waiter.add_done_callback(lambda _: self._event.set())
        else:
            self._loop.add_reader(self._fd, self._event.set)

    async def wait(self) -> None:
        await self._event.wait()

    def close(self) -> None:
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)


def _private(path: str, flags: int) -> int:
    """Open as a file only the worker may read (an action's stdout and stderr)."""
    return os.open(path, flags, 0o600)


def _inside(path: Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def _output_paths(command: CommandInfo) -> list[str]:
    if command.output_paths:
        return list(command.output_paths)
    return [*command.output_files, *command.output_directories]
