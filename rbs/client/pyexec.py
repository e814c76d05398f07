"""JobExecutor: a concurrent.futures.Executor whose calls run as cluster jobs.

    from rbs.client import JobExecutor
    with JobExecutor(cpus=1, time="10m") as ex:
        fut = ex.submit(pow, 2, 10)        # one job
        print(fut.result())                # 1024
        print(list(ex.map(abs, range(-3, 0))))   # one array job

Every `submit` is one job and every `map` one array job (its items cut into at most
MAP_TASKS tasks unless `chunksize` says otherwise). The function and each task's
arguments are pickled with cloudpickle and staged through the CAS with a small runner
(rbs.client.pybundle, rbs.client.pyrun), so the worker needs only a python3 of the
caller's major.minor; the runner checks that, and cloudpickle's version, before it
unpickles anything. Results and exceptions come back as the job's outputs. A remote
exception is raised again here, its remote traceback attached as its __cause__.

Job flags (`rbs job submit`'s names with underscores: cpus, memory_gb, gpus, time,
queue, max_retries, container, env, ...) are keyword arguments of the executor,
changed with `update_parameters(**flags)`, or given for one call with
`submit_with(flags, fn, *args, **kwargs)`. One background thread polls the submitted
jobs on its own connection and settles their futures.
"""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from rbs.client import pybundle, pyrun
from rbs.client.errors import JobError
from rbs.client.jobs import JobsClient
from rbs.model import Digest
from rbs.wire import jobs_api_requests as req

MAP_TASKS = 100  # the most tasks a map's array job gets when chunksize is not given
POLL_MIN_S, POLL_MAX_S = 0.05, 0.5


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a job, as its text."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


class JobFailed(JobError):
    """A job that ended without a result for its call (cancelled, timed out, refused)."""


class JobFuture(Future[Any]):
    """A Future bound to a job (or one array task); cancel() cancels that job."""

    def __init__(self, executor: JobExecutor, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id
        self._executor = executor

    def cancel(self) -> bool:
        if self.done():
            return False
        self._executor._cancel_job(self.job_id)
        return super().cancel()


class _Pending:
    """One submitted job: its futures per task (None for a plain job)."""

    def __init__(self, job_id: str, tasks: dict[int | None, list[JobFuture]]) -> None:
        self.job_id = job_id
        self.tasks = tasks


class JobExecutor(Executor):
    def __init__(
        self,
        client: JobsClient | None = None,
        *,
        python: str = "python3",
        by_value: Sequence[types.ModuleType] = (),
        inputs: Sequence[str] = (),
        cwd: Path | None = None,
        name: str | None = None,
        **flags: Any,
    ) -> None:
        """`client` defaults to JobsClient() (RBS_REMOTE, else the embedded cluster).
        `python` is the interpreter the worker starts; `by_value` are local modules
        pickled by value (cloudpickle.register_pickle_by_value); `inputs` are staged
        as with `rbs job submit --inputs` (PATH or DEST=SRC, relative to `cwd`), and
        the job's working directory is on the function's sys.path. Jobs are named
        `py-FUNCTION` unless `name` (or a `name` flag) says otherwise."""
        import cloudpickle

        self._client = client if client is not None else JobsClient()
        self._lock = threading.Lock()  # the caller's connection, shared by its threads
        self._python = python
        self._inputs = tuple(inputs)
        self._cwd = cwd
        self._flags: dict[str, Any] = dict(flags)
        if name is not None:
            self._flags["name"] = name
        for module in by_value:
            cloudpickle.register_pickle_by_value(module)
        self._pending: dict[str, _Pending] = {}
        self._wake = threading.Condition()
        self._shutdown = False
        self._watcher: threading.Thread | None = None
        self.last_upload: pybundle.Staged | None = None

    @property
    def client(self) -> JobsClient:
        return self._client

    def update_parameters(self, **flags: Any) -> None:
        """Change the job flags of later submits (e.g. cpus=2, time="1h", queue="gpu")."""
        self._flags.update(flags)

    # ---- submitting

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> JobFuture:
        return self.submit_with({}, fn, *args, **kwargs)

    def submit_with(
        self, flags: Mapping[str, Any], fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> JobFuture:
        """`submit` with job flags for this call only, over the executor's."""
        job_id = self._start(fn, [[(args, kwargs)]], flags, array=False)
        fut = JobFuture(self, job_id)
        self._watch(_Pending(job_id, {None: [fut]}))
        return fut

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> Iterator[Any]:
        """Like Executor.map, as one array job of ceil(items / chunksize) tasks."""
        futures = self.map_futures(fn, *iterables, chunksize=chunksize, flags=flags)
        return _results(futures, timeout)

    def map_futures(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        chunksize: int | None = None,
        flags: Mapping[str, Any] | None = None,
    ) -> list[JobFuture]:
        """`map`'s futures, one per item, in order; an item's future is bound to its
        array task (job id `N_TASK`), and cancelling it cancels that task."""
        items: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
            (tuple(a), {}) for a in zip(*iterables, strict=False)
        ]
        if not items:
            return []
        size = chunksize if chunksize is not None else -(-len(items) // MAP_TASKS)
        if size < 1:
            raise ValueError(f"chunksize={chunksize}: want 1 or more")
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        job_id = self._start(fn, chunks, flags or {}, array=True)
        tasks: dict[int | None, list[JobFuture]] = {}
        futures: list[JobFuture] = []
        for i, chunk in enumerate(chunks):
            tasks[i] = [JobFuture(self, f"{job_id}_{i}") for _ in chunk]
            futures += tasks[i]
        self._watch(_Pending(job_id, tasks))
        return futures

    def _start(
        self,
        fn: Callable[..., Any],
        chunks: list[list[tuple[tuple[Any, ...], dict[str, Any]]]],
        flags: Mapping[str, Any],
        *,
        array: bool,
    ) -> str:
        import cloudpickle

        if self._shutdown:
            raise RuntimeError("cannot submit after shutdown")
        spec = {**pybundle.caller_versions(), "interpreter": self._python}
        fn_blob = cloudpickle.dumps(fn)
        calls = [cloudpickle.dumps(c) for c in chunks]
        all_flags = {**self._flags, **flags}
        if not all_flags.get("name"):
            # The job's name is the function's, as `rbs job list` shows it.
            all_flags["name"] = "py-" + (
                "".join(c for c in getattr(fn, "__name__", "") if c.isalnum() or c in "_-.")
                or "call"
            )
        outputs = all_flags.pop("outputs", ())
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        all_flags["outputs"] = [pyrun.OUT_DIR, *outputs]
        if array:
            all_flags["array"] = f"0-{len(chunks) - 1}"
        command = [self._python, f"{pyrun.BUNDLE_DIR}/pyrun.py"]
        with self._lock:
            staged = pybundle.stage_bundle(
                self._client.conn, fn_blob, calls, spec, inputs=self._inputs, cwd=self._cwd
            )
            self.last_upload = staged
            cli_flags = {"--" + k.replace("_", "-"): v for k, v in all_flags.items()}
            body = req.submit_flags_body(command, cli_flags, staged.root, req.new_request_id())
            return self._client._submit(body)

    def _cancel_job(self, job_id: str) -> None:
        with self._lock:
            self._client.cancel([job_id])

    # ---- settling futures

    def _watch(self, pending: _Pending) -> None:
        with self._wake:
            self._pending[pending.job_id] = pending
            if self._watcher is None:
                self._watcher = threading.Thread(
                    target=self._watch_loop, name="rbs-job-executor", daemon=True
                )
                self._watcher.start()
            self._wake.notify()

    def _watch_loop(self) -> None:
        c = self._client
        client = JobsClient(c.server, token=c.conn.token, announce=False)
        delay = POLL_MIN_S
        try:
            while True:
                with self._wake:
                    if not self._pending:
                        if self._shutdown:
                            return
                        self._wake.wait(1.0)
                        delay = POLL_MIN_S
                        continue
                    jobs = list(self._pending.values())
                settled = False
                for p in jobs:
                    try:
                        info = client.show(p.job_id)
                    except JobError as e:
                        self._settle_all(p, JobFailed(f"job {p.job_id}: {e}"))
                        settled = True
                        continue
                    if info.done:
                        self._settle(client, p, info.state, info.reason)
                        settled = True
                delay = POLL_MIN_S if settled else min(delay * 1.5, POLL_MAX_S)
                with self._wake:
                    self._wake.wait(delay)
        finally:
            client.close()

    def _settle_all(self, p: _Pending, exc: BaseException) -> None:
        with self._wake:
            self._pending.pop(p.job_id, None)
        for futs in p.tasks.values():
            for f in futs:
                _set(f, exc=exc)

    def _settle(self, client: JobsClient, p: _Pending, state: str, reason: str | None) -> None:
        with self._wake:
            self._pending.pop(p.job_id, None)
        try:
            records = {r.get("task"): r for r in client.output_digests(p.job_id)}
        except JobError as e:
            records = {}
            reason = f"{reason or ''} (its outputs cannot be read: {e})"
        for task, futs in p.tasks.items():
            name = p.job_id if task is None else f"{p.job_id}_{task}"
            ended = f"job {name} ended {state}" + (f" ({reason})" if reason else "")
            rec = records.get(task)
            try:
                found = (
                    None
                    if rec is None
                    else pybundle.read_result(client.conn, Digest.parse(rec["digest"]))
                )
            except JobError as e:
                found = ("error", f"{ended}; its result cannot be read: {e}".encode())
            if found is None:
                for f in futs:
                    _set(f, exc=JobFailed(f"{ended} without a result; see `rbs job logs {name}`"))
            elif found[0] == "error":
                for f in futs:
                    _set(f, exc=JobFailed(found[1].decode(errors="replace").strip()))
            else:
                try:
                    outcomes = pybundle.decode_outcomes(found[1])
                except Exception as e:
                    for f in futs:
                        _set(f, exc=JobFailed(f"job {name}: its result cannot be unpickled: {e}"))
                    continue
                for f, (ok, value, tb) in zip(futs, outcomes, strict=False):
                    if ok:
                        _set(f, value=value)
                    else:
                        value.__cause__ = RemoteTraceback(tb)
                        _set(f, exc=value)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking submits; with `cancel_futures`, cancel the jobs still running;
        with `wait`, block until every future is settled."""
        with self._wake:
            self._shutdown = True
            pending = list(self._pending.values())
            self._wake.notify()
        if cancel_futures:
            for p in pending:
                for futs in p.tasks.values():
                    for f in futs:
                        f.cancel()
        if wait and self._watcher is not None:
            self._watcher.join()


def _set(f: JobFuture, *, value: Any = None, exc: BaseException | None = None) -> None:
    if f.done() or not f.set_running_or_notify_cancel():
        return
    if exc is not None:
        f.set_exception(exc)
    else:
        f.set_result(value)


def _results(futures: list[JobFuture], timeout: float | None) -> Iterator[Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        for f in futures:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            yield f.result(left)
    finally:
        for f in futures:
            if not f.done():
                f.cancel()
