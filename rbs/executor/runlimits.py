"""A run's cgroup limits and its `[rbs] limits:` line, from its RunSpec.

The I/O cap applies to the block device that holds the run's folder (`spec.cwd`); when
there is none (tmpfs, overlay) the run goes unthrottled and its log says so.

Pinned cores are the run's alone on this worker: the supervisor's runs register here
(`limits_for`, `track`, `release`; runs start on several spawn threads, hence the lock),
an unpinned run that starts while pinned runs hold cores gets a cpuset of the others,
and a pinned run that starts narrows the cpusets of the unpinned runs that have one. An
unpinned run that started while no core was pinned has no cpuset group of its own and
keeps every core (its cpu quota still holds).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

from rbs.executor.cgroup_base import JobCgroup, Limits
from rbs.executor.cgroup_pin import block_device
from rbs.executor.cgroup_v1 import V1Cgroup
from rbs.executor.cgroup_v2 import V2Cgroup
from rbs.executor.cgroups import HybridCgroup
from rbs.executor.supervisor_proto import RunSpec
from rbs.units import format_duration, format_size
from rbs.wire.cores import format_cores


def limits_for(spec: RunSpec) -> tuple[Limits, list[str]]:
    """The cgroup limits of a run, and notes for its log about what is not applied."""
    notes: list[str] = []
    device = None
    if spec.io_bps is not None:
        device, why = block_device(spec.cwd)
        if device is None:
            notes.append(f"I/O limit not enforced: {why}")
    cpu_set = None
    with _lock:
        if spec.cpu_set is not None:
            _pinned[spec.lease_id] = frozenset(spec.cpu_set)
        held = _held(but=spec.lease_id)
    if spec.cpu_set is not None:
        cpu_set = format_cores(spec.cpu_set)
    elif held:
        cpu_set = _others(held)
    limits = Limits(
        cpus=spec.cpus,
        memory_bytes=spec.memory_bytes,
        pids_max=spec.pids_max,
        cpu_set=cpu_set,
        io_bps=spec.io_bps if device is not None else None,
        io_device=device,
    )
    return limits, notes


_lock = threading.Lock()
_pinned: dict[str, frozenset[int]] = {}  # lease id -> its cores, while it runs
_unpinned: dict[str, Path] = {}  # lease id -> its cpuset.cpus file


def _held(but: str = "") -> set[int]:
    return set().union(*(c for k, c in _pinned.items() if k != but))


def _others(held: set[int]) -> str | None:
    rest = sorted(os.sched_getaffinity(0) - held)
    return format_cores(rest) if rest else None


def track(spec: RunSpec, cgroup: JobCgroup) -> None:
    """After the run's cgroup exists: narrow unpinned runs for a pinned one, or keep an
    unpinned run's cpuset file to narrow later."""
    with _lock:
        if spec.cpu_set is None:
            path = cpuset_file(cgroup)
            if path is not None:
                _unpinned[spec.lease_id] = path
            return
        held = _held()
        files = list(_unpinned.values())
    rest = _others(held)
    for f in files:
        with contextlib.suppress(OSError):
            f.write_text(rest or "")


def release(lease_id: str) -> None:
    with _lock:
        _pinned.pop(lease_id, None)
        _unpinned.pop(lease_id, None)


def cpuset_file(cgroup: JobCgroup) -> Path | None:
    """The cpuset.cpus file of a job's group, if it has a cpuset group of its own."""
    v1 = cgroup.v1 if isinstance(cgroup, HybridCgroup) else cgroup
    if isinstance(v1, V1Cgroup) and "cpuset" in v1.groups:
        return v1.groups["cpuset"] / "cpuset.cpus"
    if isinstance(cgroup, V2Cgroup) and "cpuset" in cgroup.controllers:
        return cgroup.path / "cpuset.cpus"
    return None


def limits_line(spec: RunSpec) -> str:
    parts = [
        f"cpus {spec.cpus:g}" if spec.cpus is not None else "cpus unlimited",
        f"memory {spec.memory_bytes} bytes" if spec.memory_bytes else "memory unlimited",
        f"time limit {format_duration(int(spec.time_limit_s))}"
        if spec.time_limit_s
        else "no time limit",
        f"grace {spec.grace_s:g}s",
    ]
    if spec.cpu_set is not None:
        parts.append(f"cpu cores {format_cores(spec.cpu_set)}")
    if spec.io_bps is not None:
        parts.append(f"max I/O {format_size(spec.io_bps)}/s read and write each")
    if spec.gpus is not None:
        parts.append(f"GPUs {','.join(spec.gpus) or 'none'}")
    return "limits: " + ", ".join(parts)
