"""The one vocabulary of rbs: digests, job manifests, job states, kill reasons, log lines."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Protocol


class Hasher(Protocol):
    """The part of hashlib's and blake3's hasher interface that rbs uses."""

    def update(self, data: bytes, /) -> object: ...
    def hexdigest(self) -> str: ...


class DigestFunction(enum.Enum):
    """A hash function for content addresses; always explicit, never guessed from a hash."""

    BLAKE3 = "blake3"
    SHA256 = "sha256"

    def hasher(self) -> Hasher:
        if self is DigestFunction.BLAKE3:
            # Imported here: the job CLI imports this module and must start fast.
            import blake3

            h: Hasher = blake3.blake3()
            return h
        import hashlib

        return hashlib.sha256()

    @classmethod
    def parse(cls, text: str) -> DigestFunction:
        try:
            return cls(text.lower())
        except ValueError:
            names = ", ".join(f.value for f in cls)
            raise ValueError(f"unknown digest function {text!r}; use one of: {names}") from None


DEFAULT_FUNCTION = DigestFunction.BLAKE3
_HEX64 = re.compile(r"[0-9a-f]{64}")
_TEXT = re.compile(r"(?:(?P<fn>[a-z0-9]+)[:/])?(?P<hash>[0-9a-fA-F]{64})/(?P<size>\d+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Digest:
    """A content address: hash function, lowercase hex hash, and size in bytes."""

    function: DigestFunction
    hash: str
    size: int

    def __post_init__(self) -> None:
        if not _HEX64.fullmatch(self.hash):
            raise ValueError(
                f"malformed {self.function.value} hash {self.hash!r}: want 64 lowercase hex characters"
            )
        if self.size < 0:
            raise ValueError(f"negative blob size {self.size} for {self.hash}")

    @classmethod
    def of(cls, data: bytes, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        h = function.hasher()
        h.update(data)
        return cls(function=function, hash=h.hexdigest(), size=len(data))

    @classmethod
    def empty(cls, function: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        return cls.of(b"", function)

    @classmethod
    def parse(cls, text: str, default: DigestFunction = DEFAULT_FUNCTION) -> Digest:
        """Parse `blake3:HASH/SIZE`, `sha256:HASH/SIZE` or `HASH/SIZE` (default function)."""
        m = _TEXT.fullmatch(text.strip())
        if not m:
            raise ValueError(
                f"malformed digest {text!r}: write it as FUNCTION:HASH/SIZE, "
                "e.g. blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262/0"
            )
        fn = DigestFunction.parse(m["fn"]) if m["fn"] else default
        return cls(function=fn, hash=m["hash"].lower(), size=int(m["size"]))

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    def __str__(self) -> str:
        return f"{self.function.value}:{self.hash}/{self.size}"


# ---------------------------------------------------------------- jobs (scheduler)
# The job manifest family: what a job runs and what it asks for. CLI flags and BUILD
# job rules both produce a JobManifest; the scheduler stores and runs exactly that.
# JSON conversion and text parsing (durations, quantities) live in rbs.wire.

MANIFEST_API_VERSION = "rbs/v1"
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables the scheduler sets itself; a job may not override them, since pinning and
# attempt numbers must be what the scheduler decided.
RESERVED_ENV_PREFIX = "RBS_"
DEFAULT_RESTARTS = 10  # a job's requeues after worker loss unless --restarts says otherwise
RESERVED_ENV = frozenset(
    {"CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
)


class JobState(enum.Enum):
    """A job's (or array task's) state, with Slurm's names."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"

    @property
    def terminal(self) -> bool:
        return self not in ACTIVE_STATES


# A job is active while it waits or runs; every other state is an ending.
ACTIVE_STATES = frozenset({JobState.PENDING, JobState.RUNNING})
TERMINAL_STATES = frozenset(s for s in JobState if s not in ACTIVE_STATES)

# Who submitted a job recorded before jobs had owners (docs/design/security.md).
UNKNOWN_USER = "unknown"


class KillReason(enum.Enum):
    """Why rbs stops a run before it exits by itself (SIGTERM, then SIGKILL after a grace).

    The values are the words of the journal (a run's `ending`) and of KillJob.reason, so
    they never change. All but SHUTDOWN come from the scheduler; a worker that shuts
    down stops its runs with SHUTDOWN, which never goes on the wire.
    """

    TIMEOUT = "timeout"  # the run reached its time limit
    CANCEL = "cancel"  # a user cancelled the job
    GANG_PEER_ENDED = "gang-peer-ended"  # another rank of the gang ended
    NODE_FAIL = "node-fail"  # a peer node of the gang was lost
    REQUEUE = "requeue"  # an operator requeued the job
    PREEMPT = "preempt"  # a higher-priority job needs the resources
    ORPHAN = "orphan"  # a worker runs, or reports, something the scheduler no longer wants
    SHUTDOWN = "shutdown"  # the worker itself is shutting down

    @property
    def words(self) -> str:
        """How a job's log says it, e.g. "time limit reached"."""
        return _KILL_WORDS[self]


_KILL_WORDS = {
    KillReason.TIMEOUT: "time limit reached",
    KillReason.CANCEL: "cancelled",
    KillReason.GANG_PEER_ENDED: "another rank of the job ended",
    KillReason.NODE_FAIL: "a node of the job was lost",
    KillReason.REQUEUE: "requeued",
    KillReason.PREEMPT: "preempted",
    KillReason.ORPHAN: "the scheduler no longer expects this run",
    KillReason.SHUTDOWN: "worker shutting down",
}


class LogStream(enum.StrEnum):
    """Where a log line came from; a str, so `line.stream == "err"` reads as it did."""

    OUT = "out"
    ERR = "err"
    SYS = "sys"  # written by rbs itself about the job (start, kill, OOM, upload)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogLine:
    """One numbered, timestamped line of a job's log.

    `seq` counts within one run on a worker and on the Workers stream; the server
    renumbers a job's lines into one display order (over tasks, attempts and ranks),
    which is what the jobs API and the client see. `eol` is False when the text goes
    on in the next line (a long line split) or the output ended without a newline.
    """

    seq: int
    time: float  # epoch seconds
    stream: LogStream
    text: str
    eol: bool = True
    task: int | None = None  # the array index; None for a job that is not an array
    attempt: int = 1
    rank: int = 0  # the node of a gang


class DepKind(enum.Enum):
    """How a job depends on another one (Slurm's --dependency kinds)."""

    AFTEROK = "afterok"
    AFTERANY = "afterany"
    AFTERNOTOK = "afternotok"


@dataclass(frozen=True, slots=True, kw_only=True)
class Dependency:
    """Run only after job `job_id` ended in the way `kind` asks for."""

    kind: DepKind
    job_id: int

    def __post_init__(self) -> None:
        if self.job_id < 1:
            raise ValueError(f"dependency on job id {self.job_id}: job ids start at 1")

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.job_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ArraySpec:
    """The indices of a job array, as sorted disjoint ranges, and the %N throttle."""

    # (first, last, step), last inclusive, sorted by first, spans disjoint.
    ranges: tuple[tuple[int, int, int], ...]
    throttle: int | None = None

    def __post_init__(self) -> None:
        if not self.ranges:
            raise ValueError("array spec without indices")
        prev_last = -1
        canonical = []
        for first, last, step in self.ranges:
            if first < 0 or last < first or step < 1:
                raise ValueError(f"bad array range {first}-{last}:{step}")
            if first <= prev_last:
                raise ValueError(f"array ranges overlap or are unsorted at index {first}")
            # Canonical form: `last` is an index the step reaches; one index has step 1.
            last -= (last - first) % step
            canonical.append((first, last, step if last > first else 1))
            prev_last = last
        object.__setattr__(self, "ranges", tuple(canonical))
        if self.throttle is not None and self.throttle < 1:
            raise ValueError(f"array throttle %{self.throttle} must be at least 1")

    @property
    def size(self) -> int:
        return sum((last - first) // step + 1 for first, last, step in self.ranges)

    def __str__(self) -> str:
        parts = []
        for first, last, step in self.ranges:
            text = str(first) if first == last else f"{first}-{last}"
            parts.append(text + (f":{step}" if step != 1 and first != last else ""))
        return ",".join(parts) + (f"%{self.throttle}" if self.throttle else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """What one node of a job reserves on a worker: millicores, bytes, whole GPUs."""

    cpu_millis: int = 1000
    memory_bytes: int = 1 << 30
    gpus: int = 0

    def __post_init__(self) -> None:
        if self.cpu_millis < 1:
            raise ValueError(f"cpu request {self.cpu_millis}m must be at least 1m")
        if self.memory_bytes < 1:
            raise ValueError(f"memory request {self.memory_bytes} bytes must be positive")
        if self.gpus < 0:
            raise ValueError(f"gpu request {self.gpus} must not be negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobManifest:
    """A batch job, fully resolved: the versioned structure the scheduler stores and runs."""

    name: str
    command: tuple[str, ...]
    input_root: Digest | None = None
    resources: Resources = Resources()
    queue: str = "batch"
    priority: int = 0
    time_limit: int | None = None  # seconds; None: the queue's default
    nodes: int = 1
    elastic: bool = False
    min_nodes: int | None = None
    max_nodes: int | None = None
    max_retries: int = 0
    requeue: bool = True
    # Requeues after a worker is lost, per task; 0 is what requeue=False means.
    restarts: int = DEFAULT_RESTARTS
    checkpoint_dir: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    outputs: tuple[str, ...] = ()
    # Names of the job's secrets (values travel apart: rbs.server.secrets).
    secrets: tuple[str, ...] = ()
    # Joblet's resource flags: cores to pin to (cpuset), read and write bytes/s on the
    # device that holds the job's folder (each); () and None: not limited.
    cpu_cores: tuple[int, ...] = ()
    max_iobps: int | None = None
    array: ArraySpec | None = None
    dependencies: tuple[Dependency, ...] = ()
    begin_time: float | None = None  # epoch seconds; PENDING (BeginTime) until then
    # Epoch seconds; a job not started by then ends CANCELLED (DeadlineExpired).
    deadline: float | None = None
    # An OCI image the job runs in (`--container`), on a worker with a container
    # runtime; `network` "host" (the default, as for jobs outside containers) or "none".
    container: str | None = None
    network: str = "host"
    # May be stopped for a job of a higher tier in a queue that preempts this one's
    # (rbs.scheduler.preempt): back to PENDING, or PREEMPTED, per the queue's mode.
    preemptible: bool = False
    # `rbs job submit -i`: its stdin is a pipe an attached client feeds (rbs.server.job_attach).
    interactive: bool = False
    # `--pty`: rank 0 runs on a pseudo-terminal (docs/design/interactive.md); needs `interactive`.
    pty: bool = False
    api_version: str = MANIFEST_API_VERSION

    def __post_init__(self) -> None:
        if self.container is not None and not self.container.strip():
            raise ValueError("container image is empty; give one like --container debian:12")
        if self.network not in ("host", "none"):
            raise ValueError(f"network {self.network!r}: want 'host' or 'none'")
        if self.network != "host" and self.container is None:
            raise ValueError("network 'none' needs a container image (--container IMAGE)")
        if self.pty and not self.interactive:
            raise ValueError("--pty needs --interactive (-i): rbs job submit -i --pty -- bash")
        if self.api_version != MANIFEST_API_VERSION:
            raise ValueError(
                f"unsupported manifest apiVersion {self.api_version!r}; "
                f"this rbs reads {MANIFEST_API_VERSION!r}"
            )
        if not self.name.strip():
            raise ValueError("job name is empty; give one with --name or name=")
        if not self.command or not self.command[0]:
            raise ValueError("job command is empty; give a command after -- or a --script")
        if not self.queue:
            raise ValueError("job queue is empty")
        if self.time_limit is not None and self.time_limit < 1:
            raise ValueError(f"time_limit {self.time_limit}s must be at least 1 second")
        if self.max_retries < 0:
            raise ValueError(f"max_retries {self.max_retries} must not be negative")
        if self.restarts < 0:
            raise ValueError(f"restarts {self.restarts} must not be negative")
        # One meaning, two spellings: --no-requeue and --restarts 0.
        if not self.requeue and self.restarts:
            object.__setattr__(self, "restarts", 0)
        elif self.requeue and not self.restarts:
            object.__setattr__(self, "requeue", False)
        self._check_nodes()
        # Normalize env so that equal manifests are equal objects and equal JSON.
        env = tuple(sorted(self.env))
        for (key, _), (prev, _) in zip(env[1:], env, strict=False):
            if key == prev:
                raise ValueError(f"env variable {key} given twice")
        for key, _ in env:
            if not _ENV_KEY.fullmatch(key):
                raise ValueError(f"env name {key!r} is not a valid variable name")
            if key.startswith(RESERVED_ENV_PREFIX) or key in RESERVED_ENV:
                raise ValueError(
                    f"env variable {key} is set by the scheduler and cannot be overridden"
                )
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "secrets", _secret_names(self.secrets, env))
        object.__setattr__(self, "cpu_cores", tuple(sorted(set(self.cpu_cores))))
        object.__setattr__(
            self,
            "dependencies",
            tuple(sorted(set(self.dependencies), key=lambda d: (d.kind.value, d.job_id))),
        )

    def _check_nodes(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes {self.nodes} must be at least 1")
        if self.elastic:
            if self.min_nodes is None or self.max_nodes is None:
                raise ValueError("an elastic job needs both min_nodes and max_nodes")
            if not 1 <= self.min_nodes <= self.max_nodes:
                raise ValueError(
                    f"min_nodes {self.min_nodes} / max_nodes {self.max_nodes}: "
                    "want 1 <= min_nodes <= max_nodes"
                )
        elif self.min_nodes is not None or self.max_nodes is not None:
            raise ValueError("min_nodes/max_nodes need elastic = true (or use nodes = N)")
        if self.array is not None and self.node_range[1] > 1:
            raise ValueError(
                "a job array cannot also be a multi-node gang; submit one or the other"
            )

    @property
    def node_range(self) -> tuple[int, int]:
        """The fewest and the most nodes the job can run on."""
        if self.elastic:
            assert self.min_nodes is not None and self.max_nodes is not None
            return self.min_nodes, self.max_nodes
        return self.nodes, self.nodes


def _secret_names(names: tuple[str, ...], env: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """Secret names, sorted: env names, none reserved, none twice, none also in env."""
    keys = {k for k, _ in env}
    out = tuple(sorted(names))
    for name, prev in zip(out[1:], out, strict=False):
        if name == prev:
            raise ValueError(f"secrets: {name} given twice")
    for name in out:
        if not _ENV_KEY.fullmatch(name):
            raise ValueError(f"secrets: {name!r} is not a valid variable name")
        if name.startswith(RESERVED_ENV_PREFIX) or name in RESERVED_ENV:
            raise ValueError(f"secrets: {name} is set by the scheduler and cannot be overridden")
        if name in keys:
            raise ValueError(f"secrets: {name} is also given as a plain variable; give it once")
    return out
