"""Job cgroups kept for reuse: a short job's groups are not made and removed each time.

Creating a job's groups and removing them again is most of the cgroup work of a short
job (on a hybrid host five mkdirs, three limit writes and five rmdirs: about 0.6 ms of
CPU here). The run supervisor wraps its backend in a `CgroupPool`: once a job has
ended and its group is empty (no process was left in it when the main process was
reaped), the group is kept, up to `POOL_SIZE` groups, and the next job with the same
limits takes it instead of a new one. The whole-group kill is unchanged: a job whose
group still held processes has them killed and the group removed, as before, never
reused. A kept group's counters start from zero for its next job (`JobCgroup.recycle`:
the v1 peak is reset, cpu time and OOM kills count from a baseline); one that cannot
(a v2 group with the memory controller, whose peak has no reset for every reader, or
a v1 group still charged with the page cache of files its job wrote) is removed.
Pinned cores and I/O caps depend on the other runs, so such jobs get groups of their
own; a container run's group is never kept (its engine made groups below it), nor one
whose v2 group is still populated below it. A fresh supervisor's sweep removes kept groups like any other (same scope);
`drain` removes them when the supervisor stops.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from pathlib import Path

from rbs.executor.cgroup_base import CgroupBackend, CgroupError, JobCgroup, Limits

POOL_SIZE = 32  # empty groups kept, over all limits
# The name of a kept group's folder (plus a random suffix): it serves many jobs.
POOL_KEY = "run"


class CgroupPool(CgroupBackend):
    """A backend that hands out kept groups; see the module docstring."""

    def __init__(self, inner: CgroupBackend, size: int = POOL_SIZE) -> None:
        self.inner = inner
        self.name = inner.name
        self.size = size
        self.reused = 0  # jobs that got a kept group
        self._lock = threading.Lock()  # runs start on spawn threads, end on the loop
        self._idle: dict[Limits, list[JobCgroup]] = collections.defaultdict(list)
        self._count = 0
        self._limits: dict[JobCgroup, Limits] = {}  # handed out, poolable

    def describe(self) -> str:
        return self.inner.describe()

    def create(self, key: str, limits: Limits) -> JobCgroup:
        if limits.cpu_set is not None or limits.io_bps is not None:
            return self.inner.create(key, limits)
        with self._lock:
            kept = self._idle.get(limits)
            group = kept.pop() if kept else None
            if group is not None:
                self._count -= 1
                self.reused += 1
        if group is None:
            group = self.inner.create(POOL_KEY, limits)
        with self._lock:
            self._limits[group] = limits
        return group

    def release(self, group: JobCgroup, *, empty: bool) -> None:
        with self._lock:
            limits = self._limits.pop(group, None)
            room = self._count < self.size
        if limits is None or not empty or not room or not group.recycle():
            group.remove()
            return
        with self._lock:
            self._idle[limits].append(group)
            self._count += 1

    def idle(self) -> int:
        """How many empty groups are kept now."""
        with self._lock:
            return self._count

    def drain(self) -> None:
        """Remove every kept group (they are empty)."""
        with self._lock:
            groups = [g for kept in self._idle.values() for g in kept]
            self._idle.clear()
            self._count = 0
        for g in groups:
            with contextlib.suppress(CgroupError):
                g.remove()

    def sweep(self) -> list[Path]:
        with self._lock:
            self._idle.clear()
            self._count = 0
        return self.inner.sweep()
