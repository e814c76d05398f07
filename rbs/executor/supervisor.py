"""The run supervisor: one process per worker that holds every job run and outlives the daemon.

As slurmstepd outlives slurmd. The worker daemon starts it (`python -m
rbs.executor.supervisor WORK_DIR CGROUPS SCOPE HOSTNAME`) in its own session and talks
to it over `<work-dir>/supervisor.sock` (`rbs.executor.supervisor_proto`). One poll
loop, no thread per run: the listening socket, the daemon's connection, every run's
stdout/stderr pipes and pidfd are in one epoll set; the deadlines (SIGKILL after a
grace, the end of an output drain, the lease) give its timeout.

It owns the runs: spawns them (`supervisor_run.SupervisedRun`), writes their output
to their log spools, kills them on request, reaps them, and keeps each ended run's
`Exited` until the daemon says `Forget`. It also enforces the lease the daemon renews
(docs/design/runs.md, section 2): once the lease has passed, every live run gets
SIGTERM, SIGKILL after the server's grace, and ends `lapsed`. So a daemon that is
killed, frozen or restarted changes nothing for the runs: a new daemon connects,
asks `ListRuns`, and carries on with them.

A fresh supervisor first kills what a dead one left (the worker's cgroup scope, and
the process groups named in `jobs/*/pgid`). It exits once no daemon is connected and
it holds nothing a daemon still needs: no live run, and no ended run that was neither
forgotten nor stopped by its lapsed lease. Those are kept for a restarted daemon to
report until `LINGER_S` past the lease's end (or past the daemon's leaving, with no
lease): by then the server has given the runs up and requeued them.
Standard library only (plus rbs's own stdlib-only modules): it starts fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path

from rbs.executor import supervisor_setup
from rbs.executor.cgroup_base import CgroupBackend
from rbs.executor.cgroup_pool import CgroupPool
from rbs.executor.cgroups import detect
from rbs.executor.joblog import record_of
from rbs.executor.supervisor_proto import (
    SOCKET_NAME,
    Exited,
    Forget,
    FrameReader,
    Input,
    KillRun,
    Lines,
    ListRuns,
    Message,
    ProtocolError,
    Renew,
    RunInfo,
    Runs,
    Shutdown,
    SignalRun,
    Started,
    StartRun,
    decode,
    encode,
    socket_address,
)
from rbs.executor.supervisor_run import SupervisedRun
from rbs.executor.supervisor_spawn import private_fs
from rbs.executor.supervisor_start import Starter, Starting, start_here
from rbs.executor.telemetry import Sampler, interval_from_env
from rbs.model import LogLine

log = logging.getLogger("rbs.executor.supervisor")

# With no daemon connected, how long to keep ended runs no daemon has forgotten.
LINGER_S = 60.0
# How long a fresh supervisor waits for the daemon that started it to connect.
FIRST_CONNECT_S = 120.0
# A daemon that reads nothing (frozen) gets no more than this many bytes queued; past
# it, Lines and Output events are dropped (the spool has the lines) while Exited and Runs go.
MAX_OUTBOX = 32 << 20
LAPSE_REASON = "lease"
LAPSE_MESSAGE = "the worker's lease lapsed (no word from the server)"


class Supervisor:
    """The loop; see the module docstring."""

    def __init__(self, work_dir: Path, backend: CgroupBackend, hostname: str) -> None:
        self.work_dir = work_dir
        self.backend = backend
        self.hostname = hostname
        self.sel = selectors.DefaultSelector()
        self.runs: dict[str, SupervisedRun] = {}
        self.lease_until = 0.0  # 0: no lease
        self.lease_grace = 10.0
        self.conn: socket.socket | None = None
        self.reader = FrameReader()
        self.outbox = bytearray()
        self.alone_since: float | None = time.monotonic()  # no daemon connected
        self.ever_connected = False
        self.shutting_down = False
        self._pending_lines: dict[str, list[LogLine]] = {}
        self.starter = Starter()
        # The loop's thread starts runs too (`start_here`), in a folder of its own.
        self._private = private_fs()
        self.sampler = Sampler(interval_from_env())
        self.sel.register(self.starter.wake_r, selectors.EVENT_READ, "started")
        self.listener = supervisor_setup.listen(work_dir)
        self.sel.register(self.listener, selectors.EVENT_READ, "listen")

    # ---- setup ------------------------------------------------------------------

    def sweep(self) -> None:
        supervisor_setup.sweep(self.backend, self.work_dir)

    # ---- the loop ---------------------------------------------------------------

    def serve(self) -> None:
        while not self._done():
            timeout = self._timeout()
            for key, mask in self.sel.select(timeout):
                try:
                    self._dispatch(key, mask)
                except Exception:
                    # One run's trouble must not cost the others their supervisor.
                    log.exception("handling an event failed")
            now = time.monotonic()
            self._check_lease(now)
            for run in list(self.runs.values()):
                wake = run.next_wake()
                if wake is not None and now >= wake and run not in self.starter.starting:
                    run.tick(now)
                    self._after(run)
            if self.sampler.due(now):
                self._sample()
            self._flush()

    def _sample(self) -> None:
        """One telemetry sample of every run started and not ended, as a SYS line."""
        for lease_id, run in self.runs.items():
            if run.exited is None and run.pid is not None and run not in self.starter.starting:
                gpus = run.spec.gpus or ()
                run._sys(self.sampler.sample(lease_id, run.cgroup, gpus, run.started_at or 0))
        self.sampler.forget(self.runs)

    def _timeout(self) -> float | None:
        wakes = [w for r in self.runs.values() if (w := r.next_wake()) is not None]
        if self.lease_until > 0 and any(
            r.exited is None and not r.lapsed for r in self.runs.values()
        ):
            wakes.append(self.lease_until)
        if self.conn is None and self.alone_since is not None:
            wakes.append(self._linger_end())
        if self.sampler.next_at is not None and self.runs:
            wakes.append(self.sampler.next_at)
        if not wakes:
            return None
        return max(0.0, min(wakes) - time.monotonic()) + 0.001

    def _done(self) -> bool:
        if self.conn is not None:
            return False
        now = time.monotonic()
        if self.shutting_down:
            return all(r.exited is not None for r in self.runs.values())
        if not self.ever_connected:  # the daemon that started it is still connecting
            return self.alone_since is not None and now - self.alone_since > FIRST_CONNECT_S
        for run in self.runs.values():
            if run.exited is None:
                return False
            if not run.exited.lapsed and now < self._linger_end():
                return False
        return True

    def _linger_end(self) -> float:
        """With no daemon: when the ended runs stop being worth keeping."""
        assert self.alone_since is not None
        if not self.ever_connected:
            return self.alone_since + FIRST_CONNECT_S
        return max(self.lease_until, self.alone_since) + LINGER_S

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if data == "listen":
            self._accept()
        elif data == "started":
            self._started()
        elif data == "conn":
            if mask & selectors.EVENT_READ:
                self._read_conn()
            if mask & selectors.EVENT_WRITE and self.conn is not None:
                self._write_conn()
        elif isinstance(data, tuple):
            run, what = data
            # An earlier event of this batch may have closed the fd (a reap reads the
            # pipes to their end).
            if what == "pidfd":
                if run.pidfd == key.fd:
                    run.reap()
            elif what == "stdin":
                self._feed(run, None)
            elif key.fd in run.pipes and run.read(key.fd) < 0:
                run.pipe_closed()
            self._after(run)

    def _watch(self, run: SupervisedRun, fd: int, what: str) -> None:
        st = self.starter.state(run)
        if st is not None:
            st.fds[fd] = what
        else:
            self.sel.register(fd, selectors.EVENT_READ, (run, what))

    def _unwatch(self, fd: int) -> None:
        """A run is about to close one of its fds."""
        if self.starter.forget_fd(fd):
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(fd)

    def _after(self, run: SupervisedRun) -> None:
        """Send a run's Exited once it has one (after its last lines)."""
        if run.exited is not None and run.stdin is not None and run.stdin.fd is not None:
            self._unwatch(run.stdin.fd)
            run.stdin.close()
        if run.exited is not None and not run.reported:
            run.reported = True
            records = self._records(run.spec.lease_id)  # its last lines ride in it
            self._send(dataclasses.replace(run.exited, records=records) if records else run.exited)

    # ---- the daemon's connection ------------------------------------------------

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        if self.conn is not None:
            log.warning("a new daemon connected; closing the old connection")
            self._drop_conn()
        conn.setblocking(False)
        self.conn = conn
        self.ever_connected = True
        self.shutting_down = False
        self.reader = FrameReader()
        self.outbox = bytearray()
        self.alone_since = None
        self._pending_lines.clear()
        self.sel.register(conn, selectors.EVENT_READ, "conn")

    def _drop_conn(self) -> None:
        if self.conn is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(self.conn)
        self.conn.close()
        self.conn = None
        self.outbox = bytearray()
        self._pending_lines.clear()
        self.alone_since = time.monotonic()

    def _read_conn(self) -> None:
        assert self.conn is not None
        try:
            data = self.conn.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop_conn()
            return
        try:
            for body in self.reader.feed(data):
                self._handle(decode(body))
        except ProtocolError as e:
            log.error("closing the daemon's connection: %s", e)
            self._drop_conn()

    def _send(self, msg: Message) -> None:
        if self.conn is None:
            return
        if msg.kind in ("lines", "output") and len(self.outbox) > MAX_OUTBOX:
            return
        self.outbox += encode(msg)

    def _records(self, lease_id: str) -> tuple[dict[str, object], ...]:
        """A run's pending lines as records, taken (none past MAX_OUTBOX: dropped)."""
        lines = self._pending_lines.pop(lease_id, None)
        if not lines or len(self.outbox) > MAX_OUTBOX:
            return ()
        return tuple(record_of(ln) for ln in lines)

    def _flush(self) -> None:
        for lease_id in list(self._pending_lines):
            if records := self._records(lease_id):
                self._send(Lines(lease_id=lease_id, records=records))
        if self.conn is not None and self.outbox:
            self._write_conn()

    def _write_conn(self) -> None:
        assert self.conn is not None
        try:
            n = self.conn.send(self.outbox)
        except BlockingIOError:
            n = 0
        except OSError:
            self._drop_conn()
            return
        del self.outbox[:n]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.outbox else 0)
        self.sel.modify(self.conn, events, "conn")

    # ---- requests ---------------------------------------------------------------

    def _handle(self, msg: Message) -> None:
        now = time.monotonic()
        if isinstance(msg, StartRun):
            self._start(msg)
        elif isinstance(msg, KillRun):
            run = self.runs.get(msg.lease_id)
            st = self.starter.state(run) if run is not None else None
            if st is not None:
                st.kill = st.kill or (msg.reason, msg.message)
            elif run is not None and run.exited is None:
                run.kill(msg.reason, msg.message, run.spec.grace_s, now)
        elif isinstance(msg, Input | SignalRun):
            run = self.runs.get(msg.lease_id)
            if run is None or run.exited is not None or run in self.starter.starting:
                return  # input before the start or after the end has nobody to read it
            if isinstance(msg, SignalRun):
                if run.pid is not None and run.kill_reason is None:
                    run._signal(msg.signal)
            elif run.stdin is not None:
                self._feed(run, msg)
        elif isinstance(msg, Renew):
            self.lease_until, self.lease_grace = msg.until, msg.grace_s
            for lease_id, seq in msg.acked.items():
                if (run := self.runs.get(lease_id)) is not None:
                    run.acked = max(run.acked, seq)
        elif isinstance(msg, ListRuns):
            self._send(Runs(runs=tuple(self._info(r) for r in self.runs.values())))
        elif isinstance(msg, Forget):
            if (run := self.runs.get(msg.lease_id)) is not None and run.exited is not None:
                del self.runs[msg.lease_id]
        elif isinstance(msg, Shutdown):
            self.shutting_down = True
            for lease_id in [k for k, r in self.runs.items() if r.exited is not None]:
                del self.runs[lease_id]

    def _feed(self, run: SupervisedRun, msg: Input | None) -> None:
        """Input for a run's stdin (`msg` None: the rest); its pipe polled while bytes wait."""
        feed = run.stdin
        assert feed is not None
        fd, was = feed.fd, feed.pending
        feed.flush() if msg is None else feed.feed(msg.data, msg.eof, msg.winsize)
        if was and (not feed.pending or feed.fd is None) and fd is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(fd)
        elif feed.pending and not was and feed.fd is not None:
            self.sel.register(feed.fd, selectors.EVENT_WRITE, (run, "stdin"))

    def _info(self, run: SupervisedRun) -> RunInfo:
        return RunInfo(
            spec=run.spec,
            pid=run.pid,
            started_at=run.started_at,
            acked=run.acked,
            exited=run.exited,
        )

    def _start(self, msg: StartRun) -> None:
        spec = msg.spec
        if spec.lease_id in self.runs:
            log.info("run %s is already here; ignoring the repeated start", spec.lease_id)
            return
        run = SupervisedRun(
            spec,
            backend=self.backend,
            hostname=self.hostname,
            emit=self._lines,
            watch=self._watch,
            unwatch=self._unwatch,
            raw=self._send,
        )
        self.runs[spec.lease_id] = run
        if not (self._private and start_here(self.backend, spec)):
            self.starter.submit(run)  # on a spawn thread; `_started` takes it from there
            return
        error: BaseException | None = None
        try:
            run.start()
        except Exception as e:
            error = e
        self._take_over(run, Starting(error=error), time.monotonic())

    def _started(self) -> None:
        """Runs whose start is over: poll their fds, send their lines and Started."""
        now = time.monotonic()
        for run, st in self.starter.completed():
            self._take_over(run, st, now)

    def _take_over(self, run: SupervisedRun, st: Starting, now: float) -> None:
        """Poll a started run's fds, send its lines and Started (or its failure)."""
        lease_id = run.spec.lease_id
        if st.error is not None:  # e.g. the spool cannot be written: the work dir is full
            log.error("run %s could not start: %r", lease_id, st.error)
            if run.pid is not None:  # never a process nobody watches
                with contextlib.suppress(OSError):
                    os.killpg(run.pid, signal.SIGKILL)
                    os.waitpid(run.pid, 0)
            err = f"{type(st.error).__name__}: {st.error}"
            run.exited = Exited(lease_id=lease_id, state="FAILED", error=err)
        else:
            for fd, what in st.fds.items():
                self.sel.register(fd, selectors.EVENT_READ, (run, what))
        self._lines(run, st.lines)
        if run.pid is not None and st.error is None:
            started_at = run.started_at or 0
            records = self._records(lease_id)  # its header lines ride in it
            self._send(
                Started(lease_id=lease_id, pid=run.pid, started_at=started_at, records=records)
            )
            if st.kill is not None:
                run.kill(*st.kill, run.spec.grace_s, now)
        self._after(run)

    def _lines(self, run: SupervisedRun, lines: list[LogLine]) -> None:
        st = self.starter.state(run)
        if st is not None:  # from its spawn thread: the loop sends them once it started
            st.lines.extend(lines)
        elif self.conn is not None and lines:
            self._pending_lines.setdefault(run.spec.lease_id, []).extend(lines)

    # ---- the lease --------------------------------------------------------------

    def _check_lease(self, now: float) -> None:
        if self.lease_until <= 0 or now <= self.lease_until:
            return
        for run in self.runs.values():
            if run in self.starter.starting:
                continue  # once started
            if run.exited is None and not run.lapsed and run.pid is not None:
                run.lapsed = True
                log.warning("run %s: %s; stopping it", run.spec.lease_id, LAPSE_MESSAGE)
                if run.kill_reason is None:
                    run.kill(LAPSE_REASON, LAPSE_MESSAGE, self.lease_grace, now)
                else:  # already being killed: SIGKILL no later than the server's grace
                    run.kill_at = min(run.kill_at or now, now + self.lease_grace)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(
            "usage: python -m rbs.executor.supervisor WORK_DIR CGROUPS SCOPE HOSTNAME",
            file=sys.stderr,
        )
        return 2
    work_dir, kind, scope, hostname = Path(argv[0]), argv[1], argv[2], argv[3]
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s supervisor: %(message)s"
    )
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the daemon's terminal is not for it
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    backend = CgroupPool(detect(kind, scope=scope))
    try:
        sup = Supervisor(work_dir, backend, hostname)
    except OSError as e:
        print(f"rbs supervisor: cannot listen on {work_dir / SOCKET_NAME}: {e}", file=sys.stderr)
        return 1
    sup.sweep()
    with open(work_dir / "supervisor.pid.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(work_dir / "supervisor.pid.tmp", work_dir / "supervisor.pid")
    # Ready: the daemon reads this line, then the pipe is let go.
    with contextlib.suppress(OSError):
        os.write(1, b"ready\n")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    try:
        sup.serve()
    finally:
        backend.drain()
        # Only this supervisor's own socket: a newer one may have taken the path.
        with contextlib.suppress(OSError):
            if (work_dir / "supervisor.pid").read_text() == str(os.getpid()):
                path, dir_fd = socket_address(work_dir)
                try:
                    os.unlink(path)
                finally:
                    if dir_fd is not None:
                        os.close(dir_fd)
                os.unlink(work_dir / "supervisor.pid")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
