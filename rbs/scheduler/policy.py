"""Priority policy: base + queue weight + age bonus, and the ready queue kept in that order.

The age bonus counts whole `age_interval`s on a global clock grid, so between two grid
points every job's bonus is constant and the queue's order cannot change; the queue is
re-sorted once per grid step, not once per pass, and an insert is a bisect.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from rbs.model import JobManifest, Resources
from rbs.scheduler.config import SchedulerConfig

Shape = tuple[int, int, int, int, float]  # cpu, memory, gpus, min nodes, time limit


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


J = TypeVar("J", bound=QueuedJob)


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


_Entry = tuple[int, float, int]  # -total priority, eligible time, job id


def shape_of(job: QueuedJob) -> Shape:
    """What one task of the job needs; a job needing at least another's shape fits no sooner."""
    return job.shape


def compute_shape(resources: Resources, min_nodes: int, time_limit: int | None) -> Shape:
    limit = float(time_limit) if time_limit is not None else math.inf
    return (resources.cpu_millis, resources.memory_bytes, resources.gpus, min_nodes, limit)


def dominates(a: Shape, b: Shape) -> bool:
    return a[0] >= b[0] and a[1] >= b[1] and a[2] >= b[2] and a[3] >= b[3] and a[4] >= b[4]


class ReadyQueue(Generic[J]):
    """Jobs with tasks ready to start, highest priority first, FIFO among equals."""

    def __init__(self, config: SchedulerConfig) -> None:
        self._config = config
        self._entries: list[_Entry] = []
        self._members: dict[int, _Entry] = {}
        self._jobs: dict[int, J] = {}
        self._epoch = 0
        # Distinct task shapes among members, so a pass can stop once none can fit.
        self.shapes: dict[Shape, int] = {}

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._members

    def _key(self, job: J) -> _Entry:
        total = breakdown(self._config, job, self._epoch * self._config.age_interval).total
        assert job.eligible_time is not None
        return (-total, job.eligible_time, job.id)

    def add(self, job: J) -> None:
        if job.id in self._members:
            return
        entry = self._key(job)
        self._members[job.id] = entry
        self._jobs[job.id] = job
        shape = shape_of(job)
        self.shapes[shape] = self.shapes.get(shape, 0) + 1
        bisect.insort(self._entries, entry)

    def discard(self, job_id: int) -> None:
        # Lazy: the entry stays in the list until the next compaction.
        if self._members.pop(job_id, None) is not None:
            shape = shape_of(self._jobs.pop(job_id))
            if self.shapes[shape] == 1:
                del self.shapes[shape]
            else:
                self.shapes[shape] -= 1

    def advance(self, now: float) -> bool:
        """Move to the age step of `now`; True if that re-sorted the queue."""
        epoch = math.floor(now / self._config.age_interval)
        if epoch == self._epoch:
            if len(self._entries) > 2 * len(self._members) + 64:
                self._entries = sorted(self._members.values())
            return False
        self._epoch = epoch
        self._members = {jid: self._key(job) for jid, job in self._jobs.items()}
        self._entries = sorted(self._members.values())
        return True

    def __iter__(self) -> Iterator[J]:
        """The member jobs in priority order; members may be discarded while iterating."""
        members = self._members
        for entry in self._entries:
            if members.get(entry[2]) is entry:
                yield self._jobs[entry[2]]
