"""Priority policy: base + queue weight + age bonus, and task shapes.

The age bonus counts whole `age_interval`s on a global clock grid, so between two grid
points every job's bonus is constant. The ready queue (`rbs.scheduler.ready`) keeps
jobs in this order without ever re-sorting.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Protocol

from rbs.model import JobManifest, Resources
from rbs.scheduler.config import SchedulerConfig

# cpu, memory, gpus, min nodes, time limit, needs a container runtime (0/1: fewer fit 1)
Shape = tuple[int, int, int, int, float, int]


class QueuedJob(Protocol):
    """What the policy reads of a job; the scheduler's `Job` (rbs.scheduler.state) has it."""

    @property
    def id(self) -> int: ...
    @property
    def manifest(self) -> JobManifest: ...
    @property
    def eligible_time(self) -> float | None: ...
    @property
    def shape(self) -> Shape: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PriorityBreakdown:
    """How a job's priority is made up, as `rbs job show` prints it."""

    base: int
    queue_weight: int
    age_bonus: int

    @property
    def total(self) -> int:
        return self.base + self.queue_weight + self.age_bonus


def age_bonus(config: SchedulerConfig, eligible_time: float | None, now: float) -> int:
    if eligible_time is None:
        return 0
    steps = math.floor(now / config.age_interval) - math.floor(eligible_time / config.age_interval)
    return max(0, min(config.age_max, steps))


def breakdown(config: SchedulerConfig, job: QueuedJob, now: float) -> PriorityBreakdown:
    queue = config.queue(job.manifest.queue)
    return PriorityBreakdown(
        base=job.manifest.priority,
        queue_weight=queue.priority_weight if queue else 0,
        age_bonus=age_bonus(config, job.eligible_time, now),
    )


def shape_of(job: QueuedJob) -> Shape:
    """What one task of the job needs; a job needing at least another's shape fits no sooner."""
    return job.shape


@functools.lru_cache(maxsize=4096)
def compute_shape(
    resources: Resources, min_nodes: int, time_limit: int | None, container: bool = False
) -> Shape:
    # Cached: jobs of one shape share one tuple (and a pending job stays small).
    limit = float(time_limit) if time_limit is not None else math.inf
    res = resources
    return (res.cpu_millis, res.memory_bytes, res.gpus, min_nodes, limit, int(container))
