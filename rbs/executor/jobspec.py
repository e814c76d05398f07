"""What the job runner takes (`JobSpec`) and gives back (`JobOutcome`) for one job process."""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from rbs.executor.cgroup_base import Limits
from rbs.executor.joblog import MAX_LINE_CHARS
from rbs.executor.outputs import OutputsResult, check_declared
from rbs.model import JobState, KillReason


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """One job (or one rank of a multi-node job) to run on this host.

    `env` is the job's exact environment (nothing is inherited from the worker); the
    runner adds RBS_JOB_ID, RBS_TASK_ID, RBS_ATTEMPT and, when `gpu_ids` is given,
    CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (an empty tuple hides every GPU).
    `workdir` must already exist; `outputs` are paths relative to it.
    """

    job_id: str
    argv: tuple[str, ...]
    workdir: Path
    env: Mapping[str, str] = field(default_factory=dict)
    task_id: str | None = None
    attempt: int = 1
    cpus: float | None = None
    memory_bytes: int | None = None
    pids_max: int | None = None
    gpu_ids: tuple[str, ...] | None = None
    time_limit_s: float | None = None
    grace_s: float = 10.0
    outputs: tuple[str, ...] = ()
    max_line_chars: int = MAX_LINE_CHARS

    def __post_init__(self) -> None:
        if not self.job_id or any(c.isspace() or c in "/\0" for c in self.job_id):
            raise ValueError(
                f"job id {self.job_id!r} must be non-empty, without whitespace, '/' or NUL"
            )
        argv = tuple(self.argv)
        if not argv or not argv[0]:
            raise ValueError("argv is empty: give the command to run, e.g. ('/bin/sh', 'job.sh')")
        if any("\0" in a for a in argv):
            raise ValueError("argv contains a NUL byte, which no program can receive")
        object.__setattr__(self, "argv", argv)
        object.__setattr__(self, "workdir", Path(self.workdir))
        env = dict(self.env)
        for k, v in env.items():
            if not k or "=" in k or "\0" in k or "\0" in v:
                raise ValueError(
                    f"bad environment entry {k!r}: names must be non-empty without '=' or NUL, "
                    "values without NUL"
                )
        object.__setattr__(self, "env", MappingProxyType(env))
        if self.attempt < 1:
            raise ValueError(f"attempt counts from 1, got {self.attempt}")
        if self.time_limit_s is not None and not (
            self.time_limit_s > 0 and math.isfinite(self.time_limit_s)
        ):
            raise ValueError(
                f"time limit must be a positive number of seconds, got {self.time_limit_s}"
            )
        if not (self.grace_s >= 0 and math.isfinite(self.grace_s)):
            raise ValueError(f"grace period must be >= 0 seconds, got {self.grace_s}")
        if self.gpu_ids is not None:
            gpus = tuple(self.gpu_ids)
            if any(not g or "," in g for g in gpus):
                raise ValueError(f"bad GPU ids {gpus!r}: each must be non-empty without ','")
            object.__setattr__(self, "gpu_ids", gpus)
        object.__setattr__(self, "outputs", check_declared(self.outputs))
        self.limits()  # validates cpus, memory_bytes and pids_max

    def limits(self) -> Limits:
        return Limits(cpus=self.cpus, memory_bytes=self.memory_bytes, pids_max=self.pids_max)

    @property
    def key(self) -> str:
        """Names this run: job id, task, attempt."""
        task = f".{self.task_id}" if self.task_id is not None else ""
        return f"{self.job_id}{task}.a{self.attempt}"

    def final_env(self) -> dict[str, str]:
        """The environment the job process gets."""
        env = dict(self.env)
        env["RBS_JOB_ID"] = self.job_id
        env["RBS_ATTEMPT"] = str(self.attempt)
        if self.task_id is not None:
            env["RBS_TASK_ID"] = self.task_id
        if self.gpu_ids is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids)
            # "void" is the NVIDIA container runtime's word for "no GPU at all".
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(self.gpu_ids) or "void"
        return env


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOutcome:
    """How a job process ended and what it used.

    `exit_code` is set when it exited, `signal` when a signal ended it; `error` when it
    could not be started at all (state FAILED, neither set). Peak memory and cpu time
    come from the cgroup; without one, from the main process's rusage, where the peak
    is an upper bound (the kernel counts the worker's own memory at spawn time).
    """

    state: JobState  # COMPLETED, FAILED, TIMEOUT, CANCELLED or OUT_OF_MEMORY
    exit_code: int | None = None
    signal: int | None = None
    kill_reason: KillReason | None = None
    peak_memory_bytes: int | None = None
    oom_kills: int = 0
    cpu_time_s: float | None = None
    started_at: float | None = None
    ended_at: float
    cgroup: str = ""
    error: str | None = None
    outputs: OutputsResult | None = None

    def describe(self) -> str:
        """A short human summary, e.g. "TIMEOUT (killed by SIGKILL)"."""
        if self.error is not None:
            return f"{self.state.value} ({self.error})"
        if self.signal is not None:
            return f"{self.state.value} (killed by {signal.Signals(self.signal).name})"
        return f"{self.state.value} (exit code {self.exit_code})"
