"""One run inside the supervisor: spawn into its cgroup, read its pipes, kill, reap, sum up.

Only `start` blocks, and runs on a spawn thread (`rbs.executor.supervisor_start`); the
rest is driven by the supervisor's one poll loop (`rbs.executor.supervisor`), which
hands each run its readable pipes and pidfd and calls `tick` at the deadlines
`next_wake` names. When the spool cannot take a line (a full disk), the run holds its
lines and stops reading its pipes, so the job waits in its next write, and tries again
every `RETRY_S`; its exit is reported only once every line is spooled. How the job
is spawned, born in its cgroup or held by a shim until it is in, in a new session (its
own process group), so that it never runs an instruction outside its cgroup, is
`rbs.executor.supervisor_spawn`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import resource
import shlex
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from rbs.executor import jobsecrets, procs, runlimits, runuser, supervisor_spawn
from rbs.executor.cgroup_base import CgroupBackend, CgroupError, JobCgroup, NullCgroup
from rbs.executor.joblog import LineSplitter, LogSpool
from rbs.executor.supervisor_proto import Exited, Output, RunSpec
from rbs.executor.supervisor_pty import CrSplitter
from rbs.executor.supervisor_stdin import StdinFeed
from rbs.model import LogLine, LogStream

RETRY_S = 0.5  # how often a run whose spool is full tries again
READ_CHUNK = 64 * 1024
# Without a pidfd, how often to ask whether the job has exited.
POLL_FALLBACK_S = 0.05
# After the main process is gone, how long to read output a process that escaped the
# job's process group and cgroup may still hold open.
DRAIN_S = 2.0
PGID_FILE = "pgid"  # in the run's folder: a fresh supervisor kills what it names
NOT_STAGED = "; only what --inputs stages is shared: try --inputs {0} (or .) or --script {0}"

log = logging.getLogger("rbs.executor.supervisor")

Emit = Callable[["SupervisedRun", list[LogLine]], None]


class SupervisedRun:
    """A run from `start` to its `exited` summary; see the module docstring."""

    def __init__(
        self,
        spec: RunSpec,
        *,
        backend: CgroupBackend,
        hostname: str,
        emit: Emit,
        watch: Callable[[SupervisedRun, int, str], None] = lambda run, fd, what: None,
        unwatch: Callable[[int], None] = lambda fd: None,
        raw: Callable[[Output], None] = lambda msg: None,  # a --pty run's terminal output
    ) -> None:
        self.spec = spec
        self._raw = raw
        self._watch = watch  # the loop polls this fd for this run ("pipe" or "pidfd")
        self._unwatch = unwatch  # called before an fd the loop polls is closed
        self.reported = False  # Exited sent to the daemon
        self._backend = backend
        self._hostname = hostname
        self._emit_to = emit
        self.spool: LogSpool | None = None
        self.pid: int | None = None
        self.pidfd: int | None = None
        self.started_at: float | None = None
        self.pipes: dict[int, tuple[LogStream, LineSplitter]] = {}
        self.cgroup: JobCgroup = NullCgroup("not created")
        self._empty = False  # reaped with nothing left in its cgroup
        self.kill_reason: str | None = None
        self.kill_at: float | None = None
        self.drain_until: float | None = None
        self.poll_at: float | None = None
        self.lapsed = False
        self.acked = 0
        self.exited: Exited | None = None
        self._start_mono = 0.0
        self._wait: tuple[int, resource.struct_rusage | None] | None = None
        self._held: list[tuple[LogStream, str, bool]] | None = []
        # Lines the spool could not take (a full disk): held, and the pipes left unread
        # (the job blocks writing) until `retry_at` finds room for them.
        self._backlog: list[tuple[LogStream, str, bool]] = []
        self._stalled_at = 0.0
        self.retry_at: float | None = None
        self.terminal: CrSplitter | None = None  # a --pty run's, when it masks secrets
        self._pending_exit: Exited | None = None
        self.user = runuser.Seat(spec.users, spec.cwd)  # its uid, when the worker has some
        self.stdin: StdinFeed | None = None  # an interactive run's (spec.stdin)
        self._exe = ""  # the program, as `_precheck` found it

    # ---- log lines --------------------------------------------------------------

    def _emit(self, entries: list[tuple[LogStream, str, bool]]) -> None:
        if not entries or self.spool is None:
            return
        if self._backlog:
            self._backlog.extend(entries)
            return
        try:
            lines = self.spool.append(entries)
        except OSError as e:
            self._backlog = list(entries)
            self._stall(e)
            return
        self._emit_to(self, lines)

    def _stall(self, error: OSError) -> None:
        log.warning(
            "run %s: cannot write its log (%s); holding its output back until there is room",
            self.spec.lease_id,
            error.strerror or error,
        )
        self._stalled_at = time.monotonic()
        self.retry_at = self._stalled_at + RETRY_S
        for fd in self.pipes:
            self._unwatch(fd)

    def _unstall(self, now: float) -> None:
        """Room again? Spool the held lines, then read the pipes again."""
        assert self.spool is not None
        try:
            lines = self.spool.append(self._backlog)
        except OSError:
            self.retry_at = now + RETRY_S
            return
        self._backlog, self.retry_at = [], None
        self._emit_to(self, lines)
        self._emit(
            [
                (
                    LogStream.SYS,
                    f"the worker's work dir was full: the job's output was held back for "
                    f"{now - self._stalled_at:.1f}s (the job waited to write), none lost",
                    True,
                )
            ]
        )
        if self._backlog:
            return
        for fd in self.pipes:
            self._watch(self, fd, "pipe")
        if self._pending_exit is not None:
            self._finish(self._pending_exit)

    def _sys(self, text: str) -> None:
        if self._held is not None:
            self._held.append((LogStream.SYS, text, True))
        else:
            self._emit([(LogStream.SYS, text, True)])

    def _release(self) -> None:
        held, self._held = self._held, None
        if held:
            self._emit(held)

    @property
    def last_seq(self) -> int:
        return self.spool.next_seq - 1 if self.spool is not None else 0

    # ---- start ------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the run; on failure `exited` is set (state FAILED, `error`)."""
        spec = self.spec
        self.spool = LogSpool(Path(spec.spool))
        self._sys(
            f"{spec.title or spec.key} on host {self._hostname}: "
            f"running {shlex.join(spec.argv)} in {spec.cwd}"
        )
        problem = self._precheck()
        if problem is not None:
            self._fail(problem)
            return
        pin_notes: list[str] = []
        try:
            limits, pin_notes = runlimits.limits_for(spec)
            self.cgroup = self._backend.create(spec.key, limits)
            runlimits.track(spec, self.cgroup)
        except (CgroupError, ValueError) as e:
            self.cgroup = NullCgroup(f"creating it failed: {e}")
        if isinstance(self.cgroup, NullCgroup):
            self._sys(f"running without a cgroup: {self.cgroup.reason}")
        else:
            self._sys(f"cgroup: {self.cgroup.description}")
        for note in (*self.cgroup.notes, *pin_notes):
            self._sys(note)
        self._sys(runlimits.limits_line(spec))
        error = self.user.take(self._sys)
        if error is None and self.user.uid is not None:  # in ListRuns' spec from here on
            self.spec = dataclasses.replace(spec, uid=self.user.uid)
        error = error or self._spawn()
        if error is not None:
            self.user.give_back(kill=False)
            self._remove_cgroup()
            self._fail(error)
            return
        assert self.pid is not None
        self._sys(f"started pid {self.pid} (process group {self.pid})")
        self._release()  # before the job's first output line

    def _precheck(self) -> str | None:
        spec = self.spec
        if unsupported := spec.unsupported():
            return f"this worker's run supervisor does not support {', '.join(unsupported)}"
        if not os.path.isdir(spec.cwd):
            return f"work folder {spec.cwd} does not exist or is not a folder"
        cmd = spec.argv[0]
        env_path = spec.env.get("PATH", os.defpath)
        if "/" in cmd:
            exe = self._exe = cmd if os.path.isabs(cmd) else os.path.join(spec.cwd, cmd)
            if not os.path.isfile(exe):
                hint = "" if os.path.isabs(cmd) else NOT_STAGED.format(cmd)
                return f"program {cmd!r} not found (looked for {exe}){hint}"
            if not os.access(exe, os.X_OK):
                return (
                    f"program {cmd!r} is not executable; chmod +x it or run it via its interpreter"
                )
        else:
            found = shutil.which(cmd, path=_abs_path(env_path, spec.cwd))
            if found is None:
                return f"program {cmd!r} not found on the job's PATH ({env_path})"
            self._exe = found  # spawned by this path when the job is born in its cgroup
        return None

    def _spawn(self) -> str | None:
        spec = self.spec
        try:
            born = supervisor_spawn.spawn(
                spec, self.cgroup, self._exe, self.user.wrap, self.user.uid
            )
        except supervisor_spawn.SpawnError as e:
            return str(e)
        pid, io = born.pid, born.io
        self.stdin = io.feed(born.feed_fd, spec.stdin)
        self.pid = pid
        self.started_at = time.time()
        self._start_mono = time.monotonic()
        masker = jobsecrets.raw_masker(spec.secrets) if io.master is not None else None
        for fd, stream in io.readers:
            os.set_blocking(fd, False)
            split = jobsecrets.splitter(spec.max_line_chars, spec.secrets)
            split = io.wrap(fd, split, spec.lease_id, self._raw, masker)
            self.pipes[fd] = (stream, split)
            if isinstance(split, CrSplitter) and masker is not None:
                self.terminal = split  # its masker's held bytes have a deadline
            self._watch(self, fd, "pipe")
        try:
            self.pidfd = os.pidfd_open(pid)
            self._watch(self, self.pidfd, "pidfd")
        except OSError:
            self.poll_at = self._start_mono + POLL_FALLBACK_S  # kernels before 5.3
        if isinstance(self.cgroup, NullCgroup):  # a cgroup is swept whole, without it
            with (
                contextlib.suppress(OSError),
                open(os.path.join(os.path.dirname(spec.spool), PGID_FILE), "w") as f,
            ):
                f.write(str(pid))
        return None

    def _fail(self, error: str) -> None:
        self._sys(f"cannot start the job: {error}")
        self._release()
        self._finish(Exited(lease_id=self.spec.lease_id, state="FAILED", error=error))

    # ---- while it runs ----------------------------------------------------------

    def read(self, fd: int) -> int:
        """Read one chunk of a pipe: 1 read some, 0 nothing there, -1 at its end (closed)."""
        stream, splitter = self.pipes[fd]
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return 0
        except OSError:  # EIO: a --pty run's terminal has no process of the job left on it
            data = b""
        if data:
            self._emit([(stream, text, eol) for text, eol in splitter.feed(data)])
            return 1
        del self.pipes[fd]
        self._unwatch(fd)
        os.close(fd)
        self._emit([(stream, text, eol) for text, eol in splitter.finish()])
        return -1

    def kill(self, reason: str, message: str, grace_s: float, now: float) -> None:
        """SIGTERM now, SIGKILL after `grace_s` (the first reason wins)."""
        if self.kill_reason is not None or self.pid is None or self._wait is not None:
            return
        self.kill_reason = reason
        if grace_s > 0:
            self._sys(
                f"{message}: sending SIGTERM to the job's processes; SIGKILL follows in "
                f"{grace_s:g}s"
            )
            self._signal(signal.SIGTERM)
            self.kill_at = now + grace_s
        else:
            self._sys(f"{message}: sending SIGKILL to the job's processes (no grace period)")
            self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        assert self.pid is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        with contextlib.suppress(CgroupError):
            self.cgroup.signal(sig)

    def next_wake(self) -> float | None:
        held = self.terminal.due if self.terminal is not None else None
        times = (self.kill_at, self.drain_until, self.poll_at, self.retry_at, held)
        wakes = [t for t in times if t is not None]
        return min(wakes) if wakes else None

    def tick(self, now: float) -> None:
        """Act on the deadlines that have passed."""
        if self.terminal is not None and (due := self.terminal.due) is not None and now >= due:
            self.terminal.release()
        if self.retry_at is not None and now >= self.retry_at:
            self._unstall(now)
        if self.kill_at is not None and now >= self.kill_at:
            self.kill_at = None
            if self._wait is None:
                self._sys(f"grace period of {self.spec.grace_s:g}s over: sending SIGKILL")
                self._signal(signal.SIGKILL)
        if self.poll_at is not None and now >= self.poll_at:
            self.poll_at = None
            self.reap()
            if self._wait is None:
                self.poll_at = now + POLL_FALLBACK_S
        if self.drain_until is not None and now >= self.drain_until:
            self.drain_until = None
            for fd in list(self.pipes):
                stream, splitter = self.pipes.pop(fd)
                self._unwatch(fd)
                os.close(fd)
                self._emit([(stream, text, eol) for text, eol in splitter.finish()])
            self._sys(
                "stopped reading output: a process outside the job's process group "
                "and cgroup still holds its stdout/stderr"
            )
            self._summarize()

    def reap(self) -> None:
        """The pidfd is readable (or it is time to poll): collect the exit, if any."""
        assert self.pid is not None
        rusage: resource.struct_rusage | None
        try:
            waited, status, rusage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:
            waited, status, rusage = self.pid, 0, None
        if waited != self.pid:
            return
        self._wait = (status, rusage)
        if self.pidfd is not None:
            self._unwatch(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        self.poll_at = None
        for fd in list(self.pipes):  # what the pipes hold right now
            for _ in range(64):  # a process left running may write forever
                if self.read(fd) != 1:
                    break
        tracked = not isinstance(self.cgroup, NullCgroup)
        try:
            leftovers = len(self.cgroup.pids()) if tracked else len(procs.group_members(self.pid))
            # Kept for reuse then; never a container's, whose engine made groups below it.
            self._empty = tracked and not leftovers and self.spec.container is None
        except CgroupError:
            leftovers = 0
        if leftovers or not tracked:
            self._signal(signal.SIGKILL)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if leftovers:
            self._sys(f"killed {leftovers} process(es) left running when the main process ended")
        self._held = []  # the last lines go out together
        if self.pipes:
            self.drain_until = time.monotonic() + DRAIN_S
        else:
            self._summarize()

    def pipe_closed(self) -> None:
        """A pipe reached its end after the exit: summarize once both have."""
        if (
            self._wait is not None
            and not self.pipes
            and self.exited is None
            and self._pending_exit is None
        ):
            self.drain_until = None
            self._summarize()

    def _summarize(self) -> None:
        assert self._wait is not None
        status, rusage = self._wait
        spec = self.spec
        code = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - self._start_mono
        try:
            usage = self.cgroup.usage()
        except CgroupError:
            usage = None
        peak = usage.peak_memory_bytes if usage is not None else None
        cpu = usage.cpu_time_s if usage is not None else None
        oom = usage.oom_kills if usage is not None else 0
        if peak is None and rusage is not None:
            peak = rusage.ru_maxrss * 1024  # KiB; the main process and its reaped children
        if cpu is None and rusage is not None:
            cpu = rusage.ru_utime + rusage.ru_stime
        if oom:
            limit = f" (memory limit {spec.memory_bytes} bytes)" if spec.memory_bytes else ""
            self._sys(f"out of memory: the kernel killed {oom} process(es){limit}")
        if self.kill_reason == "timeout":
            state = "TIMEOUT"
        elif self.kill_reason is not None:
            state = "PREEMPTED" if self.kill_reason in ("preempt", "requeue") else "CANCELLED"
        elif oom:
            state = "OUT_OF_MEMORY"
        else:
            state = "COMPLETED" if code == 0 else "FAILED"
        how = f"exit code {code}" if code >= 0 else f"killed by {_signame(-code)}"
        self._sys(
            f"ended {state}: {how}, peak memory {peak} bytes, cpu {cpu or 0:.3f}s, wall {wall:.3f}s"
        )
        self._remove_cgroup()
        self._release()
        self._finish(
            Exited(
                lease_id=spec.lease_id,
                state=state,
                exit_code=code if code >= 0 else None,
                signal=-code if code < 0 else None,
                kill_reason=self.kill_reason,
                peak_memory_bytes=peak,
                oom_kills=oom,
                cpu_time_s=cpu,
                started_at=self.started_at,
                ended_at=time.time(),
                cgroup=self.cgroup.description,
                lapsed=self.lapsed,
            )
        )

    def _remove_cgroup(self) -> None:
        runlimits.release(self.spec.lease_id)
        try:
            self._backend.release(self.cgroup, empty=self._empty)
        except CgroupError as e:
            self._sys(f"could not remove the job's cgroup: {e}")

    def _finish(self, exited: Exited) -> None:
        self._release()
        if self._backlog:  # every line is in the spool before the run is over
            self._pending_exit = exited
            return
        self._pending_exit = None
        self.user.give_back(kill=isinstance(self.cgroup, NullCgroup))  # else the cgroup's
        self.exited = exited
        if isinstance(self.cgroup, NullCgroup):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(os.path.dirname(self.spec.spool), PGID_FILE))
        if self.spool is not None:
            self.spool.close()


def _abs_path(path: str, cwd: str) -> str:
    if _all_absolute(path):  # the usual PATH: as it is, for every run
        return path
    return os.pathsep.join(
        p if os.path.isabs(p) else os.path.join(cwd, p or ".") for p in path.split(os.pathsep)
    )


@functools.lru_cache(maxsize=64)
def _all_absolute(path: str) -> bool:
    return all(p.startswith("/") for p in path.split(os.pathsep))


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
