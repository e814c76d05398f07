"""`--cpu-cores`: which workers a pinned job may go to, and what it refuses at submit.

A worker's core ids are 0 to its cpu count - 1 (`--cpus`). A pinned job is placed only on
a worker where each of its cores exists and no other pinned allocation holds it, so two
pinned jobs never share a core; the cores it holds are found from the worker's
allocations when a pinned job is placed (pinned jobs are few; unpinned placements never
look). A pinned job's shape is its own (its last element is negative and names its
cores), so the pass's shape caches never mix it with unpinned jobs: an unpinned failure
says nothing about it, and its failures are not recorded for others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from rbs.model import JobManifest
from rbs.scheduler.policy import Shape
from rbs.scheduler.workers import WorkerCapacity


class _HasManifest(Protocol):
    manifest: JobManifest


def pinned_shape(shape: Shape, cores: tuple[int, ...]) -> Shape:
    """`shape` made distinct per core set (and never dominated by an unpinned one)."""
    mask = sum(1 << c for c in cores)
    return (*shape[:5], -1 - mask)


def worker_cores(w: WorkerCapacity) -> int:
    return w.cpu_millis // 1000


def held_cores(w: WorkerCapacity, jobs: Mapping[int, _HasManifest]) -> set[int]:
    """The cores pinned jobs hold on `w` now."""
    held: set[int] = set()
    for job_id, _index, _attempt, _rank in w.allocs:
        job = jobs.get(job_id)
        if job is not None:
            held.update(job.manifest.cpu_cores)
    return held


def cores_free(w: WorkerCapacity, cores: tuple[int, ...], jobs: Mapping[int, _HasManifest]) -> bool:
    """Whether `w` has every one of `cores` and no pinned job holds any of them."""
    if not cores or max(cores) >= worker_cores(w):
        return not cores
    return held_cores(w, jobs).isdisjoint(cores)


def refusal(m: JobManifest, workers: Iterable[WorkerCapacity]) -> str | None:
    """Why no worker could ever run the pinned job `m`, or None."""
    if not m.cpu_cores:
        return None
    from rbs.wire.cores import format_cores

    alive = [w for w in workers if w.alive]
    if any(max(m.cpu_cores) < worker_cores(w) for w in alive):
        return None
    most = max((worker_cores(w) for w in alive), default=0)
    have = f"the largest has cores 0-{most - 1}" if most else "no worker is connected"
    return (
        f"--cpu-cores {format_cores(m.cpu_cores)}: no worker has these cores ({have}); "
        "ask for cores below a worker's cpu count"
    )
