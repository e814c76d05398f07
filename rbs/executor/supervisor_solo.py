"""One supervised run driven to its end on the calling thread, without the supervisor.

The run supervisor's loop (`rbs.executor.supervisor`) serves every run of a worker
over its socket. `SoloRun` drives a single `SupervisedRun` the same way (its pipes and
pidfd in a poll set of its own, `tick` at the deadlines it names) on the caller's
thread (its start on a spawn thread of its own, as the supervisor's), for benchmarks and tests of a run itself: the cgroup backends, kills, the
spool. Standard library only, as the supervisor.
"""

from __future__ import annotations

import contextlib
import selectors
import threading
import time
from collections.abc import Callable

from rbs.executor import supervisor_spawn
from rbs.executor.cgroup_base import CgroupBackend
from rbs.executor.supervisor_proto import Exited, RunSpec
from rbs.executor.supervisor_run import SupervisedRun
from rbs.model import LogLine


class SoloRun:
    """Start with `start`, drive with `until` or `wait`; every spooled line is in `lines`."""

    def __init__(self, spec: RunSpec, backend: CgroupBackend, hostname: str = "solo") -> None:
        self._sel = selectors.DefaultSelector()
        self.lines: list[LogLine] = []
        self.run = SupervisedRun(
            spec,
            backend=backend,
            hostname=hostname,
            emit=lambda run, lines: self.lines.extend(lines),
            watch=self._watch,
            unwatch=self._unwatch,
        )

    def _watch(self, run: SupervisedRun, fd: int, what: str) -> None:
        self._sel.register(fd, selectors.EVENT_READ, what)

    def _unwatch(self, fd: int) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(fd)

    def start(self) -> SoloRun:
        """Start the run on a thread with a folder of its own, as the supervisor's spawn
        threads are (so the job is born in its cgroup the same way)."""
        errors: list[BaseException] = []

        def go() -> None:
            supervisor_spawn.private_fs()
            try:
                self.run.start()
            except BaseException as e:  # raised again on the caller's thread
                errors.append(e)
            finally:
                supervisor_spawn.end_private_fs()

        spawner = threading.Thread(target=go, name="rbs-spawn-solo")
        spawner.start()
        spawner.join()
        if errors:
            raise errors[0]
        return self

    def kill(self, reason: str, message: str) -> None:
        """As the supervisor does on a KillRun: SIGTERM, SIGKILL after the spec's grace."""
        self.run.kill(reason, message, self.run.spec.grace_s, time.monotonic())

    def until(self, done: Callable[[], bool], timeout: float = 60.0) -> None:
        """Serve the run's events until `done()` (or its end); TimeoutError past `timeout`."""
        deadline = time.monotonic() + timeout
        run = self.run
        while not done() and run.exited is None:
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"run {run.spec.lease_id} still going after {timeout:g}s")
            wake = run.next_wake()
            wait = deadline - now if wake is None else max(0.0, min(wake, deadline) - now)
            for key, _ in self._sel.select(wait + 0.001):
                if key.data == "pidfd":
                    if run.pidfd == key.fd:
                        run.reap()
                elif key.fd in run.pipes and run.read(key.fd) < 0:
                    run.pipe_closed()
            wake = run.next_wake()
            if wake is not None and time.monotonic() >= wake:
                run.tick(time.monotonic())

    def wait(self, timeout: float = 60.0) -> Exited:
        """Drive the run to its end: its `Exited`."""
        self.until(lambda: False, timeout)
        assert self.run.exited is not None
        self._sel.close()
        return self.run.exited
