"""Run and supervise one job process: cgroup, process group, time limit, logs, outcome.

How a job starts: a tiny /bin/sh shim is spawned in a new session (its own process
group) and blocks reading a pipe; the runner writes the shim's pid into the job's
cgroup(s), then releases it and the shim execs the job. So the job never runs a
single instruction outside its cgroup, and no Python runs between fork and exec
(`preexec_fn` is unsafe in a threaded worker).

How it is supervised: one thread runs `JobRunner.run()`, a poll loop over the
job's stdout and stderr pipes, a pidfd that turns readable when the job exits, and a
wake-up pipe that `kill()` writes to from any thread. Each read is split into lines,
spooled, then handed to the sink. On a time limit, cancel or peer ending, the whole
process group and cgroup get SIGTERM, then SIGKILL after the grace period. When the
main process ends, whatever is left of the job is killed.

asyncio callers await `run_async()`, which runs `run()` on a thread of its own and
cancels the job if the awaiting task is cancelled. The sink is called on the runner
thread; an asyncio worker forwards with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from rbs.executor import procs
from rbs.executor.cgroup_base import CgroupBackend, CgroupError, JobCgroup, NullCgroup
from rbs.executor.jobio import OutputPump
from rbs.executor.joblog import LogSink, LogSpool
from rbs.executor.jobspec import JobOutcome, JobSpec
from rbs.executor.outputs import collect_outputs
from rbs.model import JobState, KillReason, LogLine, LogStream

log = logging.getLogger(__name__)

# The shim: wait for the go-ahead on stdin (EOF means the runner gave up), then give
# the job /dev/null as its stdin and exec it.
SHIM = 'read -r _ || exit 125; exec </dev/null; exec "$@"'
# Without a pidfd, how often to check whether the job has exited.
POLL_FALLBACK_S = 0.05
# After the job's processes are gone, how long to keep reading output that a process
# outside the job (one that escaped its process group) may still hold open.
DRAIN_S = 2.0


class JobRunner:
    """Runs one `JobSpec` once. `run()` blocks; `kill()`/`cancel()` may come from any thread."""

    def __init__(
        self,
        spec: JobSpec,
        *,
        spool: LogSpool,
        backend: CgroupBackend,
        sink: LogSink | None = None,
        hostname: str | None = None,
    ) -> None:
        self.spec = spec
        self.spool = spool
        self.backend = backend
        self.sink = sink
        self.hostname = hostname or socket.gethostname()
        self.pid: int | None = None
        # Where to write the job's process group as soon as it runs (the worker's lease
        # watchdog reads it: rbs.executor.lease).
        self.pgid_file: Path | None = None
        self.outcome: JobOutcome | None = None
        # Set when run() has returned (with or without an outcome).
        self.finished = threading.Event()
        self._lock = threading.Lock()
        self._request: tuple[KillReason, str] | None = None
        # The wake-up pipe exists only while run() does; kill() before that just records.
        self._wake_r = self._wake_w = -1
        self._ran = False
        # Sys lines held back to go out as one batch (one spool write, one sink call):
        # a short job's lines before its start and after its end would each cost a
        # write and a wake-up of the worker's loop otherwise. Runner thread only.
        self._held: list[tuple[LogStream, str, bool]] | None = None

    # ---- control, from any thread -------------------------------------------------

    def kill(self, reason: KillReason = KillReason.CANCEL, message: str = "") -> None:
        """End the job: SIGTERM, then SIGKILL after the grace period. The first reason wins."""
        with self._lock:
            if self._request is None:
                self._request = (reason, message or reason.words)
            if self._wake_w >= 0:
                with contextlib.suppress(BlockingIOError):  # pipe full: already woken
                    os.write(self._wake_w, b"k")

    def cancel(self) -> None:
        self.kill(KillReason.CANCEL)

    async def run_async(self) -> JobOutcome:
        """`run()` on its own thread; cancelling the awaiting task cancels the job."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[JobOutcome] = loop.create_future()

        def settle(result: JobOutcome | None, error: BaseException | None) -> None:
            if fut.done():
                return
            if error is not None:
                fut.set_exception(error)
            else:
                assert result is not None
                fut.set_result(result)

        def target() -> None:
            outcome: JobOutcome | None = None
            error: BaseException | None = None
            try:
                outcome = self.run()
            except BaseException as e:
                error = e
            try:
                loop.call_soon_threadsafe(settle, outcome, error)
            except RuntimeError:  # the loop is closed; `outcome` and `finished` still tell
                if error is not None:
                    log.error(
                        "job %s failed after its event loop closed", self.spec.key, exc_info=error
                    )

        threading.Thread(target=target, name=f"job-{self.spec.key}", daemon=True).start()
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            self.cancel()
            raise

    # ---- logging -----------------------------------------------------------------

    def _emit(self, entries: list[tuple[LogStream, str, bool]]) -> list[LogLine]:
        lines = self.spool.append(entries)
        if lines and self.sink is not None:
            try:
                self.sink(lines)
            except Exception:
                # The spool already holds the lines; the worker can re-ship from it.
                log.exception("log sink failed for job %s", self.spec.key)
        return lines

    def _sys(self, text: str) -> None:
        if self._held is not None:
            self._held.append((LogStream.SYS, text, True))
        else:
            self._emit([(LogStream.SYS, text, True)])

    def _release(self) -> None:
        """Emit the held sys lines; later ones go out as they come."""
        held, self._held = self._held, None
        if held:
            self._emit(held)

    # ---- the run -----------------------------------------------------------------

    def run(self) -> JobOutcome:
        """Start the job, supervise it to the end, clean up, and say how it went."""
        if self._ran:
            raise RuntimeError(f"job {self.spec.key}: a JobRunner runs its job only once")
        self._ran = True
        with self._lock:
            self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._held = []  # until the job has started (or failed to)
        try:
            self.outcome = self._run()
            return self.outcome
        finally:
            self._release()
            self.finished.set()
            with self._lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1

    def _fail(self, error: str, cgroup: str = "") -> JobOutcome:
        self._sys(f"cannot start the job: {error}")
        return JobOutcome(state=JobState.FAILED, ended_at=time.time(), error=error, cgroup=cgroup)

    def _run(self) -> JobOutcome:
        spec = self.spec
        task = f" task {spec.task_id}" if spec.task_id is not None else ""
        self._sys(
            f"job {spec.job_id}{task} attempt {spec.attempt} on host {self.hostname}: "
            f"running {shlex.join(spec.argv)} in {spec.workdir}"
        )
        with self._lock:
            early = self._request
        if early is not None:
            self._sys(f"{early[1]} before the job started; not starting it")
            return JobOutcome(state=JobState.CANCELLED, kill_reason=early[0], ended_at=time.time())
        problem = self._precheck()
        if problem is not None:
            return self._fail(problem)
        try:
            cgroup: JobCgroup = self.backend.create(spec.key, spec.limits())
        except CgroupError as e:
            cgroup = NullCgroup(f"creating it failed: {e}")
        if isinstance(cgroup, NullCgroup):
            self._sys(f"running without a cgroup: {cgroup.reason}")
        else:
            self._sys(f"cgroup: {cgroup.description}")
        for note in cgroup.notes:
            self._sys(note)
        self._sys(_limits_line(spec))
        try:
            return self._supervise(cgroup)
        finally:
            try:
                cgroup.remove()
            except CgroupError as e:
                log.warning("job %s: %s", spec.key, e)
                self._sys(f"could not remove the job's cgroup: {e}")

    def _precheck(self) -> str | None:
        spec = self.spec
        if not spec.workdir.is_dir():
            return f"work folder {spec.workdir} does not exist or is not a folder"
        cmd = spec.argv[0]
        env_path = spec.env.get("PATH", os.defpath)
        if "/" in cmd:
            exe = cmd if os.path.isabs(cmd) else os.path.join(spec.workdir, cmd)
            if not os.path.isfile(exe):
                return f"program {cmd!r} not found (looked for {exe})"
            if not os.access(exe, os.X_OK):
                return (
                    f"program {cmd!r} is not executable; chmod +x it or run it via its interpreter"
                )
        elif shutil.which(cmd, path=_abs_path(env_path, spec.workdir)) is None:
            return f"program {cmd!r} not found on the job's PATH ({env_path})"
        return None

    def _launch(self, cgroup: JobCgroup) -> tuple[subprocess.Popen[bytes] | None, str | None]:
        go_r, go_w = os.pipe2(os.O_CLOEXEC)
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", SHIM, "rbs-job", *self.spec.argv],
                stdin=go_r,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.spec.workdir,
                env=self.spec.final_env(),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            os.close(go_w)
            return None, f"cannot spawn the job: {e}"
        finally:
            os.close(go_r)
        try:
            cgroup.join(proc.pid)
        except CgroupError as e:
            os.close(go_w)  # the shim sees EOF and exits without running the job
            proc.wait()
            _close_pipes(proc)
            return None, f"cannot move the job into its cgroup: {e}"
        os.write(go_w, b"go\n")
        os.close(go_w)
        return proc, None

    def _supervise(self, cgroup: JobCgroup) -> JobOutcome:
        spec = self.spec
        proc, error = self._launch(cgroup)
        if proc is None:
            assert error is not None
            return self._fail(error, cgroup.description)
        started_at = time.time()
        start = time.monotonic()
        self.pid = pid = proc.pid
        if self.pgid_file is not None:
            with contextlib.suppress(OSError):
                self.pgid_file.write_text(str(pid))
        self._sys(f"started pid {pid} (process group {pid})")
        self._release()  # before the job's first output line
        assert proc.stdout is not None and proc.stderr is not None
        pump = OutputPump(self._emit, spec.max_line_chars)
        pump.add_pipe(proc.stdout.fileno(), LogStream.OUT)
        pump.add_pipe(proc.stderr.fileno(), LogStream.ERR)
        try:
            status, rusage, reason = self._watch(cgroup, pid, pump, start)
        except BaseException:
            # Never leave a job running unsupervised, whatever went wrong here.
            _kill_all(cgroup, pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            _close_pipes(proc)
            raise
        wall = time.monotonic() - start
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        self._end_leftovers(cgroup, pid, pump)
        _close_pipes(proc)
        self._held = []  # the pipes are read to the end: the last lines go out together
        usage = cgroup.usage()
        peak, cpu = usage.peak_memory_bytes, usage.cpu_time_s
        if peak is None:
            peak = rusage.ru_maxrss * 1024  # KiB; the main process and its reaped children
        if cpu is None:
            cpu = rusage.ru_utime + rusage.ru_stime
        if usage.oom_kills:
            limit = f" (memory limit {spec.memory_bytes} bytes)" if spec.memory_bytes else ""
            self._sys(f"out of memory: the kernel killed {usage.oom_kills} process(es){limit}")
        self._sys(f"exited with code {code}" if code >= 0 else f"killed by {_signame(-code)}")
        outputs = None
        if spec.outputs:
            outputs = collect_outputs(spec.workdir, spec.outputs)
            for miss in outputs.missing:
                self._sys(f"declared output {miss!r} was not created")
            for rej in outputs.rejected:
                self._sys(f"output refused: {rej.reason}")
        state = _state(reason, usage.oom_kills, code)
        self._sys(
            f"ended {state.value}: peak memory {peak} bytes, cpu {cpu:.3f}s, wall {wall:.3f}s"
        )
        return JobOutcome(
            state=state,
            exit_code=code if code >= 0 else None,
            signal=-code if code < 0 else None,
            kill_reason=reason,
            peak_memory_bytes=peak,
            oom_kills=usage.oom_kills,
            cpu_time_s=cpu,
            started_at=started_at,
            ended_at=time.time(),
            cgroup=cgroup.description,
            outputs=outputs,
        )

    def _watch(
        self, cgroup: JobCgroup, pid: int, pump: OutputPump, start: float
    ) -> tuple[int, resource.struct_rusage, KillReason | None]:
        """Log output and enforce the time limit and kill requests until the main process
        exits; returns its wait status, rusage, and why rbs ended it (if it did)."""
        spec = self.spec
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except OSError:
            pidfd = None  # kernels before 5.3: poll waitpid instead
        pump.add_fd(self._wake_r)
        if pidfd is not None:
            pump.add_fd(pidfd)
        limit_at = start + spec.time_limit_s if spec.time_limit_s is not None else None
        reason: KillReason | None = None
        kill_at: float | None = None  # when SIGKILL follows the SIGTERM
        try:
            while True:
                waited, status, rusage = os.wait4(pid, os.WNOHANG)
                if waited == pid:
                    return status, rusage, reason
                now = time.monotonic()
                with self._lock:
                    request = self._request
                if reason is None and request is not None:
                    reason = request[0]
                    kill_at = self._terminate(cgroup, pid, request[1], now)
                elif reason is None and limit_at is not None and now >= limit_at:
                    reason = KillReason.TIMEOUT
                    why = f"time limit of {_secs(spec.time_limit_s)} reached"
                    kill_at = self._terminate(cgroup, pid, why, now)
                if kill_at is not None and now >= kill_at:
                    if spec.grace_s > 0:
                        self._sys(f"grace period of {_secs(spec.grace_s)} over: sending SIGKILL")
                    _kill_all(cgroup, pid, signal.SIGKILL)
                    kill_at = None
                wakes = [
                    t for t in (kill_at, limit_at if reason is None else None) if t is not None
                ]
                timeout = max(0.0, min(wakes) - now) if wakes else None
                if pidfd is None:
                    timeout = POLL_FALLBACK_S if timeout is None else min(timeout, POLL_FALLBACK_S)
                if self._wake_r in pump.poll(timeout):
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def _terminate(self, cgroup: JobCgroup, pid: int, why: str, now: float) -> float:
        """Send SIGTERM (unless there is no grace period); returns when SIGKILL is due."""
        grace = self.spec.grace_s
        if grace > 0:
            self._sys(
                f"{why}: sending SIGTERM to the job's processes; SIGKILL follows in {_secs(grace)}"
            )
            _kill_all(cgroup, pid, signal.SIGTERM)
        else:
            self._sys(f"{why}: sending SIGKILL to the job's processes (no grace period)")
        return now + grace

    def _end_leftovers(self, cgroup: JobCgroup, pgid: int, pump: OutputPump) -> None:
        """The main process has exited: log its last output, kill what is left of the job,
        then read the pipes to EOF."""
        pump.pump_ready()
        # A real cgroup holds every process of the job, also those that left its group.
        tracked = not isinstance(cgroup, NullCgroup)
        leftovers = len(cgroup.pids()) if tracked else len(procs.group_members(pgid))
        if leftovers or not tracked:
            _kill_all(cgroup, pgid, signal.SIGKILL)
        else:
            # An empty cgroup gains no process (only members fork into it): the process
            # group is all that could be left, should a job have moved itself out.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        if leftovers:
            self._sys(f"killed {leftovers} process(es) left running when the main process ended")
        if not pump.drain(DRAIN_S):
            self._sys(
                "stopped reading output: a process outside the job's process group "
                "and cgroup still holds its stdout/stderr"
            )
        if not tracked:  # with a cgroup, removing it waits for its processes to go
            procs.wait_group_gone(pgid)


def _kill_all(cgroup: JobCgroup, pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    try:
        cgroup.signal(sig)
    except CgroupError as e:
        log.warning("signalling cgroup %s: %s", cgroup.description, e)


def _state(reason: KillReason | None, oom_kills: int, code: int) -> JobState:
    if reason is KillReason.TIMEOUT:
        return JobState.TIMEOUT
    if reason is not None:
        return JobState.CANCELLED
    if oom_kills:
        return JobState.OUT_OF_MEMORY
    return JobState.COMPLETED if code == 0 else JobState.FAILED


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def _abs_path(path: str, cwd: Path) -> str:
    return os.pathsep.join(
        p if os.path.isabs(p) else str(cwd / (p or ".")) for p in path.split(os.pathsep)
    )


def _secs(s: float | None) -> str:
    return f"{s:g}s"


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _limits_line(spec: JobSpec) -> str:
    parts = [
        f"cpus {spec.cpus:g}" if spec.cpus is not None else "cpus unlimited",
        f"memory {spec.memory_bytes} bytes" if spec.memory_bytes else "memory unlimited",
        f"time limit {_secs(spec.time_limit_s)}" if spec.time_limit_s else "no time limit",
        f"grace {_secs(spec.grace_s)}",
    ]
    if spec.gpu_ids is not None:
        parts.append(f"GPUs {','.join(spec.gpu_ids) or 'none'}")
    return "limits: " + ", ".join(parts)
