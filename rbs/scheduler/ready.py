"""The ready queue: jobs with tasks to start, by priority, indexed by task shape, ageing in place.

Priority is base + queue weight + an age bonus of one point per whole `age_interval`
since the job became eligible, capped at `age_max`. While a job's bonus grows, its
total is `base + weight - e + E`, where `e` is its eligible step and `E` the clock's:
every growing job gains the same point at the same step, so the key `e - base - weight`
orders them for good. Jobs whose bonus reached the cap have the fixed key
`-(base + weight + age_max)`. A job moves from the first kind to the second once, when
the clock passes its step plus `age_max`; no step re-sorts the queue.

Each kind keeps one sorted stream per task shape (cpu, memory, GPUs, nodes, time
limit) and a sorted list of the streams' heads. A pass walks the heads in priority
order, merging the two kinds with a small heap, and takes a stream's next job only
after the one before it started; once a job of a shape fails, the pass closes that
shape and never looks at its other jobs. Removals during a walk are deferred to its
end, so the walk reads structures that do not move under it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Generator, Iterator
from typing import Generic, TypeVar

from sortedcontainers import SortedList

from rbs.scheduler.config import SchedulerConfig
from rbs.scheduler.policy import QueuedJob, Shape

_GROWING, _CAPPED = 0, 1


J = TypeVar("J", bound=QueuedJob)
# (key, eligible time, job id, kind, job): unique by job id, so the job is never compared.
_Entry = tuple[int, float, int, int, J]
_Head = tuple[int, float, int, Shape]


class ReadyQueue(Generic[J]):
    """Jobs with tasks ready to start, highest priority first, FIFO among equals."""

    def __init__(self, config: SchedulerConfig) -> None:
        self._config = config
        self._epoch = 0
        self._entries: dict[int, _Entry[J]] = {}
        self._streams: tuple[dict[Shape, SortedList], dict[Shape, SortedList]] = ({}, {})
        self._heads: tuple[SortedList, SortedList] = (SortedList(), SortedList())
        # Growing jobs' ids by eligible step, to move them to the capped kind in step
        # order, and how many of each step are still queued: a step whose jobs all left
        # goes, and one mostly left is pruned, so jobs gone (ended) are not kept here.
        self._by_step: dict[int, list[int]] = {}
        self._live: dict[int, int] = {}
        self._steps: list[int] = []
        self._walking = False
        self._deferred: list[_Entry[J]] = []
        # How many queued jobs have each task shape: what lets a pass see that nothing
        # left in the queue can start.
        self.shape_counts: dict[Shape, int] = {}
        self.shapes_added = 0  # shapes that came into `shape_counts` (new keys), ever

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._entries

    @property
    def epoch(self) -> int:
        """The age step the queue's order is as of."""
        return self._epoch

    def _weight(self, job: J) -> int:
        queue = self._config.queue(job.manifest.queue)
        return job.manifest.priority + (queue.priority_weight if queue else 0)

    def add(self, job: J) -> None:
        if job.id in self._entries:
            return
        elig = job.eligible_time
        assert elig is not None
        step = math.floor(elig / self._config.age_interval)
        weight = self._weight(job)
        entry: _Entry[J]
        if self._epoch - step >= self._config.age_max:
            entry = (-(weight + self._config.age_max), elig, job.id, _CAPPED, job)
        else:
            entry = (step - weight, elig, job.id, _GROWING, job)
            bucket = self._by_step.get(step)
            if bucket is None:
                bucket = self._by_step[step] = []
                heapq.heappush(self._steps, step)
            bucket.append(job.id)
            self._live[step] = self._live.get(step, 0) + 1
        self._entries[job.id] = entry
        count = self.shape_counts.get(job.shape, 0)
        if not count:
            self.shapes_added += 1
        self.shape_counts[job.shape] = count + 1
        if self._walking:
            self._deferred.append(entry)
        else:
            self._insert(entry)

    def discard(self, job_id: int) -> None:
        entry = self._entries.pop(job_id, None)
        if entry is None:
            return
        if entry[3] == _GROWING:
            self._left(entry[0] + self._weight(entry[4]))
        shape = entry[4].shape
        if self.shape_counts[shape] == 1:
            del self.shape_counts[shape]
        else:
            self.shape_counts[shape] -= 1
        if self._walking:
            self._deferred.append(entry)
        else:
            self._remove(entry)

    def advance(self, now: float) -> bool:
        """Move to the age step of `now`; True if the step changed (priorities moved)."""
        epoch = math.floor(now / self._config.age_interval)
        if epoch <= self._epoch:
            return False
        self._epoch = epoch
        cap = self._config.age_max
        while self._steps and self._steps[0] <= epoch - cap:
            step = heapq.heappop(self._steps)
            self._live.pop(step, None)
            for job_id in self._by_step.pop(step, ()):
                if not self._growing_at(job_id, step):
                    continue  # left the queue (or came back later with another entry)
                entry = self._entries[job_id]
                job = entry[4]
                self._remove(entry)
                capped = (-(self._weight(job) + cap), entry[1], job.id, _CAPPED, job)
                self._entries[job.id] = capped
                self._insert(capped)
        return bool(self._entries)

    def _growing_at(self, job_id: int, step: int) -> bool:
        entry = self._entries.get(job_id)
        return (
            entry is not None and entry[3] == _GROWING and entry[0] == step - self._weight(entry[4])
        )

    def _left(self, step: int) -> None:
        """A growing job of `step` left the queue (its entry is already out of `_entries`)."""
        live = self._live.get(step, 0) - 1
        bucket = self._by_step.get(step)
        if live <= 0 or bucket is None:
            self._live.pop(step, None)
            self._by_step.pop(step, None)  # its `_steps` entry is skipped when due
            return
        self._live[step] = live
        if len(bucket) > 2 * live + 8:
            bucket[:] = [j for j in dict.fromkeys(bucket) if self._growing_at(j, step)]

    def _insert(self, entry: _Entry[J]) -> None:
        kind, shape = entry[3], entry[4].shape
        stream = self._streams[kind].get(shape)
        if stream is None:
            stream = self._streams[kind][shape] = SortedList()
        first = stream[0] if stream else None
        stream.add(entry)
        if first is None or entry < first:
            if first is not None:
                self._heads[kind].remove((first[0], first[1], first[2], shape))
            self._heads[kind].add((entry[0], entry[1], entry[2], shape))

    def _remove(self, entry: _Entry[J]) -> None:
        kind, shape = entry[3], entry[4].shape
        stream = self._streams[kind][shape]
        was_first = stream[0][2] == entry[2]
        stream.remove(entry)
        if was_first:
            self._heads[kind].remove((entry[0], entry[1], entry[2], shape))
            if stream:
                nxt = stream[0]
                self._heads[kind].add((nxt[0], nxt[1], nxt[2], shape))
            else:
                del self._streams[kind][shape]

    def walk(self, closed: set[Shape]) -> Generator[tuple[J, bool], None, None]:
        """(job, first of its shape) in priority order, skipping shapes in `closed`.

        The caller adds a shape to `closed` to skip the rest of its jobs; a job is
        yielded again only if it is still queued when its turn comes. Close the
        generator when done: queue changes made meanwhile are applied then.
        """
        self._walking = True
        try:
            yield from self._merge(closed)
        finally:
            self._walking = False
            deferred, self._deferred = self._deferred, []
            for entry in deferred:
                if self._entries.get(entry[2]) is entry:
                    self._insert(entry)  # added during the walk
                else:
                    self._remove(entry)  # discarded during the walk

    def _merge(self, closed: set[Shape]) -> Iterator[tuple[J, bool]]:
        epoch, entries = self._epoch, self._entries
        heads = (iter(self._heads[0]), iter(self._heads[1]))
        streams = self._streams
        # (priority key, seq, kind, shape, the stream's iterator, the entry to yield next,
        # whether it is a stream head taken from the heads list). A head has no iterator
        # until its shape stays open past it: most shapes a pass meets close at their head.
        heap: list[
            tuple[
                tuple[int, float, int], int, int, Shape, Iterator[_Entry[J]] | None, _Entry[J], bool
            ]
        ] = []
        seq = 0
        seen: set[Shape] = set()

        def push(
            kind: int, shape: Shape, it: Iterator[_Entry[J]] | None, entry: _Entry[J], head: bool
        ) -> None:
            nonlocal seq
            seq += 1
            key = (entry[0] - epoch if kind == _GROWING else entry[0], entry[1], entry[2])
            heapq.heappush(heap, (key, seq, kind, shape, it, entry, head))

        def next_head(kind: int) -> None:
            for _key, _elig, _job_id, shape in heads[kind]:
                push(kind, shape, None, streams[kind][shape][0], True)
                return

        def after_head(kind: int, shape: Shape) -> Iterator[_Entry[J]]:
            it: Iterator[_Entry[J]] = iter(streams[kind][shape])
            next(it)
            return it

        def next_valid(it: Iterator[_Entry[J]]) -> _Entry[J] | None:
            for entry in it:
                if entries.get(entry[2]) is entry:
                    return entry
            return None

        next_head(_GROWING)
        next_head(_CAPPED)
        while heap:
            _, _, kind, shape, it, entry, head = heapq.heappop(heap)
            if head:
                next_head(kind)
            if shape in closed:
                continue
            if entries.get(entry[2]) is not entry:
                if it is None:
                    it = after_head(kind, shape)
                nxt = next_valid(it)
                if nxt is not None:
                    push(kind, shape, it, nxt, False)  # file it at its own place in the order
                continue
            first = shape not in seen
            seen.add(shape)
            yield entry[4], first
            if shape not in closed:
                if it is None:
                    it = after_head(kind, shape)
                nxt = next_valid(it)
                if nxt is not None:
                    push(kind, shape, it, nxt, False)

    def order(self) -> list[J]:
        """Every queued job in priority order (O(n log n); for tests and views)."""
        epoch = self._epoch
        ranked = sorted(
            (e[0] - epoch if e[3] == _GROWING else e[0], e[1], e[2]) for e in self._entries.values()
        )
        return [self._entries[job_id][4] for _, _, job_id in ranked]
