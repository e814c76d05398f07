"""The run supervisor's interface: `RunSpec`, the requests and events, length-prefixed JSON.

The worker daemon and its supervisor (`rbs.executor.supervisor`) talk over the unix
socket `<work-dir>/supervisor.sock`. Each frame is a 4-byte big-endian length and one
JSON object; its "kind" names one of the message classes below (`KINDS` is the one
table), the other keys are that class's fields. Standard library only: the supervisor
starts in a fresh interpreter and must start fast.

Requests (daemon -> supervisor): `StartRun`, `KillRun`, `Renew`, `ListRuns`, `Forget`,
`Shutdown`, and for an interactive run `Input` (its stdin) and `SignalRun`.
Events (supervisor -> daemon): `Started`, `Lines`, `Exited`, `Runs`, and a --pty run's
raw terminal `Output`. A run's lines that are pending when its `Started` or `Exited`
goes ride in that frame (`records`, before it in order), so a short job costs two
frames, not four; a daemon takes `Lines` frames too (a supervisor of a version before
this one sends only those, and a daemon re-attaches to it across an upgrade).
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

HEADER = struct.Struct(">I")
MAX_FRAME = 64 << 20  # a Lines event holds at most a few batches of 16 KiB lines
SOCKET_NAME = "supervisor.sock"


def socket_address(work_dir: Path) -> tuple[str, int | None]:
    """The socket's path, short enough for AF_UNIX (108 bytes): a long work dir is
    reached through /proc/self/fd; returns the path and the folder fd to close."""
    path = str(work_dir / SOCKET_NAME)
    if len(path.encode()) < 100:
        return path, None
    fd = os.open(work_dir, os.O_PATH | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{SOCKET_NAME}", fd


class ProtocolError(Exception):
    """A frame that is too long, not JSON, or not a known message."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """One process to run: THE plug-in point for how a run is set up on this host.

    What exists: the lease id (names the run everywhere), argv, the exact environment,
    the working directory, cgroup limits (`cpus`, `memory_bytes`, `pids_max`), the GPUs
    the run may see (already in `env` as CUDA_VISIBLE_DEVICES; listed for the log),
    `grace_s` between SIGTERM and SIGKILL, the log spool's path, and `owner`: data the
    daemon stores with the run and gets back in `Runs` after a restart.

    Where the rest goes: a container (image, mounts), a pty, cpu pinning,
    telemetry and secrets are fields of this class, each carried out by the supervisor
    where it spawns (`rbs/executor/supervisor_run.py::spawn`). The ones named below are
    reserved: the supervisor refuses a spec that sets them until it implements them, so
    a run never silently runs without the isolation it asked for.
    """

    lease_id: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    spool: str  # the run's log spool (rbs.executor.joblog.LogSpool)
    key: str  # names its cgroup, e.g. "12.0.a1"
    title: str = ""  # the first sys line's "job 12 task 0 attempt 1" part
    cpus: float | None = None
    memory_bytes: int | None = None
    pids_max: int | None = None
    gpus: tuple[str, ...] | None = None
    grace_s: float = 10.0
    time_limit_s: float | None = None  # shown in the limits line; the server enforces it
    max_line_chars: int = 16 * 1024
    owner: Mapping[str, Any] = field(default_factory=dict)
    # Run as a uid of its own (rbs.executor.runuser.as_spec: first, last, lock_dir,
    # private_tmp, tmp); `uid` is the one the supervisor took (a StartRun setting it is
    # refused: only the supervisor's pool hands uids out).
    users: Mapping[str, Any] | None = None
    uid: int | None = None
    # A container run (rbs.executor.containers): engine, image id, network; argv runs it.
    container: Mapping[str, Any] | None = None
    # The run's stdin is a pipe the supervisor feeds from `Input` requests (an
    # interactive job, docs/design/interactive.md); otherwise it reads /dev/null.
    stdin: bool = False
    # The run's stdin, stdout and stderr are a pseudo-terminal the supervisor holds
    # (rbs.executor.supervisor_pty; `rbs job submit -i --pty`); needs `stdin`.
    pty: bool = False
    # Pinned cores (cpuset) and the read and write bytes/s cap on the device of `cwd`
    # (rbs.executor.runlimits).
    cpu_set: tuple[int, ...] | None = None
    io_bps: int | None = None
    # Added to `env` at spawn only, and masked in the log (rbs.executor.jobsecrets).
    secrets: Mapping[str, str] | None = None

    def unsupported(self) -> list[str]:
        """The reserved fields this spec sets."""
        names = ("uid",)  # the supervisor's
        return [n for n in names if getattr(self, n) not in (None, False)]


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRun:
    kind: ClassVar[str] = "start"
    spec: RunSpec


@dataclass(frozen=True, slots=True, kw_only=True)
class KillRun:
    """SIGTERM the run's processes, SIGKILL after its grace; the first reason wins."""

    kind: ClassVar[str] = "kill"
    lease_id: str
    reason: str  # a rbs.model.KillReason value
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Renew:
    """The lease now ends at `until` (CLOCK_MONOTONIC); `until` 0: no lease. `acked` carries
    the log seqs the server acknowledged since the last renewal, kept for a restart."""

    kind: ClassVar[str] = "renew"
    until: float
    grace_s: float
    acked: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListRuns:
    kind: ClassVar[str] = "list"


@dataclass(frozen=True, slots=True, kw_only=True)
class Forget:
    """The daemon is done with an ended run: drop its record."""

    kind: ClassVar[str] = "forget"
    lease_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Shutdown:
    """The daemon stops for good (its runs killed): forget every ended run, and exit
    once no run is live and the daemon has gone."""

    kind: ClassVar[str] = "shutdown"


@dataclass(frozen=True, slots=True, kw_only=True)
class Input:
    """Bytes for an interactive run's stdin (`data`: base64); `eof` closes it after them
    (a --pty run's gets ^D); `winsize` (rows, cols) resizes a --pty run's terminal."""

    kind: ClassVar[str] = "input"
    lease_id: str
    data: str = ""
    eof: bool = False
    winsize: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalRun:
    """Send `signal` (a number, e.g. SIGINT) to a running run's processes."""

    kind: ClassVar[str] = "signal"
    lease_id: str
    signal: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Started:
    """The run's process is up; `records`: its lines (the header) that came before."""

    kind: ClassVar[str] = "started"
    lease_id: str
    pid: int
    started_at: float  # wall clock
    records: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Lines:
    """Lines already in the run's spool: spool records (rbs.executor.joblog.to_record)."""

    kind: ClassVar[str] = "lines"
    lease_id: str
    records: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Output:
    """Raw bytes (base64) a --pty run wrote to its terminal, as read: for attached
    clients, never stored (its spool has the same output as lines)."""

    kind: ClassVar[str] = "output"
    lease_id: str
    data: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Exited:
    """How a run ended. `state` is a JobState value; `error` set when it never started;
    `lapsed` when the supervisor stopped it because the lease ran out. `records`: its
    last lines, those not sent yet (as a `Lines` before it would carry them)."""

    kind: ClassVar[str] = "exited"
    lease_id: str
    state: str
    exit_code: int | None = None
    signal: int | None = None
    kill_reason: str | None = None
    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    cpu_time_s: float | None = None
    started_at: float | None = None
    ended_at: float = 0.0
    cgroup: str = ""
    error: str | None = None
    lapsed: bool = False
    records: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """One run the supervisor holds, as `Runs` lists it."""

    spec: RunSpec
    pid: int | None = None
    started_at: float | None = None
    acked: int = 0  # the last log seq the server acknowledged, as the daemon said
    exited: Exited | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Runs:
    kind: ClassVar[str] = "runs"
    runs: tuple[RunInfo, ...]


Message = (
    StartRun
    | KillRun
    | Renew
    | ListRuns
    | Forget
    | Shutdown
    | Input
    | SignalRun
    | Started
    | Lines
    | Output
    | Exited
    | Runs
)
KINDS: dict[str, type[Any]] = {
    c.kind: c
    for c in (
        StartRun,
        KillRun,
        Renew,
        ListRuns,
        Forget,
        Shutdown,
        Input,
        SignalRun,
        Started,
        Lines,
        Output,
        Exited,
        Runs,
    )
}


def _spec(data: Mapping[str, Any]) -> RunSpec:
    d = dict(data)
    d["argv"] = tuple(d["argv"])
    for k in ("gpus", "cpu_set"):
        if d.get(k) is not None:
            d[k] = tuple(d[k])
    return RunSpec(**d)


def _run_info(data: Mapping[str, Any]) -> RunInfo:
    d = dict(data)
    d["spec"] = _spec(d["spec"])
    if d.get("exited") is not None:
        ex = {k: v for k, v in d["exited"].items() if k != "kind"}
        ex["records"] = tuple(ex.get("records", ()))
        d["exited"] = Exited(**ex)
    return RunInfo(**d)


_ALWAYS = object()  # the default of a field that has none: always sent
# Per message class: its fields and their defaults (`_fields_of`).
_FIELDS: dict[type[Any], tuple[tuple[str, Any], ...]] = {}


def _field_defaults(cls: type[Any]) -> tuple[tuple[str, Any], ...]:
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out.append((f.name, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            out.append((f.name, f.default_factory()))
        else:
            out.append((f.name, _ALWAYS))
    return tuple(out)


def _fields_of(value: Any) -> dict[str, Any]:
    """A message (or a field's dataclass or mapping) as a dict for the JSON encoder,
    which calls this for what it cannot write itself: shallow, and without the fields
    at their defaults (the decoder's dataclass fills them in, so a supervisor of an
    earlier version reads these frames too). Dicts, lists, tuples and strings (an
    environment, log records) are written by the encoder's C code, not here."""
    cls = type(value)
    fields = _FIELDS.get(cls)
    if fields is None:
        if not dataclasses.is_dataclass(value):
            if isinstance(value, Mapping):
                return dict(value)
            raise TypeError(f"{cls.__name__} is not a supervisor message value")
        fields = _FIELDS[cls] = _field_defaults(cls)
    out = {}
    for name, default in fields:
        v = getattr(value, name)
        if v is not default and v != default:
            out[name] = v
    return out


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_fields_of)


def encode(msg: Message) -> bytes:
    """One frame: length, then the message as JSON with its kind."""
    body = _fields_of(msg)
    body["kind"] = msg.kind
    data = _ENCODER.encode(body).encode()
    return HEADER.pack(len(data)) + data


def decode(data: bytes) -> Message:
    """A frame's body back into its message."""
    try:
        body = json.loads(data)
        cls = KINDS[body.pop("kind")]
        if cls is StartRun:
            return StartRun(spec=_spec(body["spec"]))
        if cls is Runs:
            return Runs(runs=tuple(_run_info(r) for r in body["runs"]))
        if "records" in body:  # Lines, or a Started or Exited with lines
            body["records"] = tuple(body["records"])
        if cls is Input and body.get("winsize") is not None:
            body["winsize"] = tuple(body["winsize"])
        msg: Message = cls(**body)
        return msg
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ProtocolError(f"bad supervisor frame: {type(e).__name__}: {e}") from e


class FrameReader:
    """Splits a byte stream into frame bodies."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out = []
        while len(self._buf) >= HEADER.size:
            (n,) = HEADER.unpack_from(self._buf)
            if n > MAX_FRAME:
                raise ProtocolError(f"supervisor frame of {n} bytes is over {MAX_FRAME}")
            if len(self._buf) < HEADER.size + n:
                break
            out.append(bytes(self._buf[HEADER.size : HEADER.size + n]))
            del self._buf[: HEADER.size + n]
        return out
