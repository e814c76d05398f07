"""Worker job-slot accounting: free resources, concrete GPU ids, rendezvous ports, best fit.

`FreeIndex` keeps the workers that could take a task now (alive, reachable, a free
slot) sorted by free (GPUs, cpu, memory, slots), so a best-fit query is a bisect and a
short walk instead of a scan of every worker; each `WorkerCapacity` re-files itself
there whenever its free amounts or its liveness change.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

from sortedcontainers import SortedList

from rbs.model import Resources
from rbs.scheduler.instructions import NodeRecord, WorkerRecord

NodeKey = tuple[int, int | None, int, int]  # job id, index, attempt, rank
_FreeKey = tuple[int, int, int, int, int]  # free gpus, cpu, memory, slots, worker seq


class Work:
    """Operation counters of the core (never timings): what a decision costs, for tests and benches."""

    __slots__ = (
        "allocations_visited",
        "failure_checks",
        "jobs_examined",
        "shapes_examined",
        "workers_examined",
    )

    def __init__(self) -> None:
        self.workers_examined = 0  # worker entries looked at by placement and reservation
        self.allocations_visited = 0  # release-calendar entries walked by reservations
        self.jobs_examined = 0  # jobs a pass tried to start
        self.shapes_examined = 0  # distinct task shapes a pass reached
        # Shapes compared with a failure earlier in their pass (pass_failures.py); kept
        # out of `total`, whose figures the tests of the other counts compare.
        self.failure_checks = 0

    def total(self) -> int:
        return (
            self.workers_examined
            + self.allocations_visited
            + self.jobs_examined
            + self.shapes_examined
        )


class FreeIndex:
    """The workers with a free job slot, alive and reachable, in best-fit order.

    Keys sort by free GPUs, then free cpu, memory and slots, then registration order:
    for one request that is the order of least leftover, GPUs first (a CPU job takes a
    GPU worker last). `fitting` walks one GPU level at a time from the first key with
    enough cpu, skipping entries short of memory, so a query costs O(log W + skipped).
    """

    def __init__(self, work: Work) -> None:
        self.work = work
        self._keys: SortedList = SortedList()
        self._by_seq: dict[int, WorkerCapacity] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, w: WorkerCapacity) -> bool:
        return w.ikey is not None

    def update(self, w: WorkerCapacity) -> None:
        new: _FreeKey | None = None
        if w.alive and w.reachable and w.free_slots > 0:
            new = (len(w.free_gpus), w.free_cpu, w.free_mem, w.free_slots, w.seq)
        old = w.ikey
        if old == new:
            return
        if old is not None:
            self._keys.remove(old)
        if new is None:
            self._by_seq.pop(w.seq, None)
        else:
            self._keys.add(new)
            self._by_seq[w.seq] = w
        w.ikey = new

    def fitting(self, res: Resources) -> Iterator[WorkerCapacity]:
        """Workers where `res` fits now, best fit first; stop early for cost O(log W + walked)."""
        need_gpus, cpu, mem = res.gpus, res.cpu_millis, res.memory_bytes
        work, keys, by_seq = self.work, self._keys, self._by_seq
        if not keys or keys[-1] < (need_gpus, cpu):
            return  # not even the worker with the most free GPUs and cpu has enough
        level = need_gpus
        while True:
            jump = None
            for key in keys.irange(minimum=(level, cpu)):
                work.workers_examined += 1
                if key[0] != level and key[1] < cpu:
                    jump = key[0]  # the next GPU level: restart at its first key with enough cpu
                    break
                level = key[0]
                if key[2] >= mem:
                    yield by_seq[key[4]]
            if jump is None:
                return
            level = jump

    def keys(self) -> list[_FreeKey]:
        """Every key, in order (for the invariant checks)."""
        return list(self._keys)


class DrainIndex:
    """Workers by the time all they run has ended at the latest (by time limits).

    What a reservation falls back to when the release calendar would have to be walked
    far (a whole-node request on nodes full of small jobs): the earliest-draining
    eligible workers, in O(log W + skipped). A drained worker holds anything it could
    ever hold, so the promise is kept, if later than the best one.
    """

    def __init__(self) -> None:
        # One list per worker GPU count, so a GPU request never walks the CPU workers.
        self._by_gpus: dict[int, SortedList] = {}  # GPUs -> (drain time, worker seq)
        self._by_seq: dict[int, WorkerCapacity] = {}
        self._class: dict[int, int] = {}  # worker seq -> the GPU count it is filed under

    def update(self, w: WorkerCapacity) -> None:
        new = None
        if w.ends:
            drain = max(w.ends.values())
            if drain != math.inf:
                new = (drain, w.seq)
        if new == w.dkey and (new is None or self._class[w.seq] == len(w.gpus)):
            return
        if w.dkey is not None:
            self._by_gpus[self._class.pop(w.seq)].remove(w.dkey)
            self._by_seq.pop(w.seq, None)
        if new is not None:
            keys = self._by_gpus.get(len(w.gpus))
            if keys is None:
                keys = self._by_gpus[len(w.gpus)] = SortedList()
            keys.add(new)
            self._by_seq[w.seq] = w
            self._class[w.seq] = len(w.gpus)
        w.dkey = new

    def earliest(self, gpus: int) -> Iterator[tuple[float, WorkerCapacity]]:
        """Busy workers with at least `gpus` GPUs, earliest drained first."""
        lists = [keys for n, keys in self._by_gpus.items() if n >= gpus]
        for drain, seq in heapq.merge(*lists):
            yield drain, self._by_seq[seq]

    def keys(self) -> list[tuple[float, int]]:
        return sorted(k for keys in self._by_gpus.values() for k in keys)


class WorkerCapacity:
    """One worker's capacity and what is allocated on it, node by node."""

    __slots__ = (
        "_alive",
        "_reachable",
        "address",
        "allocs",
        "containers",
        "cpu_millis",
        "dkey",
        "drains",
        "ends",
        "free_cpu",
        "free_gpus",
        "free_mem",
        "free_slots",
        "gpus",
        "hostname",
        "ikey",
        "index",
        "job_slots",
        "last_seen",
        "master_ports",
        "memory_bytes",
        "seq",
        "used_ports",
        "worker_id",
    )

    def __init__(self, rec: WorkerRecord, now: float) -> None:
        self.worker_id = rec.worker_id
        self.allocs: dict[NodeKey, NodeRecord] = {}
        self.used_ports: set[int] = set()
        self.last_seen = now
        self.index: FreeIndex | None = None  # set by the scheduler state that files it
        self.ikey: _FreeKey | None = None
        self.drains: DrainIndex | None = None
        self.dkey: tuple[float, int] | None = None
        self.ends: dict[NodeKey, float] = {}  # allocation -> its release time
        self.seq = 0
        # Not journaled: whether the server can reach the worker now. A worker whose
        # stream broke keeps its runs until `heartbeat_timeout` (their lease may outlive
        # the outage) but takes no new ones; a restored worker starts out reachable.
        self._reachable = True
        self._alive = rec.alive
        self.reconfigure(rec)

    @property
    def alive(self) -> bool:
        return self._alive

    @alive.setter
    def alive(self, value: bool) -> None:
        self._alive = value
        self._refile()

    @property
    def reachable(self) -> bool:
        return self._reachable

    @reachable.setter
    def reachable(self, value: bool) -> None:
        self._reachable = value
        self._refile()

    def _refile(self) -> None:
        if self.index is not None:
            self.index.update(self)

    def reconfigure(self, rec: WorkerRecord) -> None:
        """Take new capacity figures, keeping current allocations."""
        self.hostname = rec.hostname
        self.address = rec.address or rec.hostname
        self.cpu_millis = rec.cpu_millis
        self.memory_bytes = rec.memory_bytes
        self.gpus = rec.gpus
        self.job_slots = rec.job_slots
        self.master_ports = rec.master_ports
        self.containers = rec.containers
        self._alive = rec.alive
        used_gpus = {g for a in self.allocs.values() for g in a.gpus}
        self.free_gpus = [g for g in self.gpus if g not in used_gpus]
        self.free_cpu = self.cpu_millis - sum(a.cpu_millis for a in self.allocs.values())
        self.free_mem = self.memory_bytes - sum(a.memory_bytes for a in self.allocs.values())
        self.free_slots = self.job_slots - len(self.allocs)
        self._refile()
        if self.drains is not None:
            self.drains.update(self)  # its GPU count may have changed

    def record(self) -> WorkerRecord:
        return WorkerRecord(
            worker_id=self.worker_id,
            hostname=self.hostname,
            address=self.address,
            cpu_millis=self.cpu_millis,
            memory_bytes=self.memory_bytes,
            gpus=self.gpus,
            job_slots=self.job_slots,
            master_ports=self.master_ports,
            alive=self.alive,
            containers=self.containers,
        )

    def could_ever_fit(self, res: Resources) -> bool:
        return (
            self.job_slots >= 1
            and self.cpu_millis >= res.cpu_millis
            and self.memory_bytes >= res.memory_bytes
            and len(self.gpus) >= res.gpus
        )

    def fits(self, res: Resources, port: bool = False) -> bool:
        return (
            self.alive
            and self.reachable
            and self.free_slots >= 1
            and self.free_cpu >= res.cpu_millis
            and self.free_mem >= res.memory_bytes
            and len(self.free_gpus) >= res.gpus
            and (not port or self._free_port() is not None)
        )

    def leftover(self, res: Resources) -> tuple[int, int, int, int]:
        # Best fit: spare GPUs first (keep GPU workers for GPU jobs), then cpu, memory, slots.
        return (
            len(self.free_gpus) - res.gpus,
            self.free_cpu - res.cpu_millis,
            self.free_mem - res.memory_bytes,
            self.free_slots,
        )

    def _free_port(self) -> int | None:
        lo, hi = self.master_ports
        for port in range(lo, hi + 1):
            if port not in self.used_ports:
                return port
        return None

    def allocate(self, key: NodeKey, res: Resources, port: bool) -> NodeRecord:
        """Take resources for one node; the lowest free GPU ids and port are pinned to it."""
        gpus = tuple(self.free_gpus[: res.gpus])
        del self.free_gpus[: res.gpus]
        master_port = self._free_port() if port else None
        if master_port is not None:
            self.used_ports.add(master_port)
        node = NodeRecord(
            rank=key[3],
            worker_id=self.worker_id,
            cpu_millis=res.cpu_millis,
            memory_bytes=res.memory_bytes,
            gpus=gpus,
            master_port=master_port,
        )
        self.adopt(key, node)
        return node

    def adopt(self, key: NodeKey, node: NodeRecord) -> None:
        """Account for an allocation made earlier (restore); GPUs must still be free."""
        if key in self.allocs:
            raise AssertionError(f"node {key} allocated twice on {self.worker_id}")
        self.allocs[key] = node
        self.ends[key] = math.inf  # until the run files its deadline (set_end)
        if self.drains is not None:
            self.drains.update(self)
        self.free_cpu -= node.cpu_millis
        self.free_mem -= node.memory_bytes
        self.free_slots -= 1
        for g in node.gpus:
            if g in self.free_gpus:
                self.free_gpus.remove(g)
        if node.master_port is not None:
            self.used_ports.add(node.master_port)
        self._refile()

    def release(self, key: NodeKey) -> NodeRecord | None:
        node = self.allocs.pop(key, None)
        if node is None:
            return None
        del self.ends[key]
        if self.drains is not None:
            self.drains.update(self)
        self.free_cpu += node.cpu_millis
        self.free_mem += node.memory_bytes
        self.free_slots += 1
        if node.gpus:
            # Keep the worker's own order so the next pin is deterministic.
            back = set(self.free_gpus) | set(node.gpus)
            self.free_gpus = [g for g in self.gpus if g in back]
        if node.master_port is not None:
            self.used_ports.discard(node.master_port)
        self._refile()
        return node

    def set_end(self, key: NodeKey, time: float) -> None:
        """When allocation `key` is released at the latest (its run's deadline)."""
        if key in self.ends and self.ends[key] != time:
            self.ends[key] = time
            if self.drains is not None:
                self.drains.update(self)

    def size_text(self) -> str:
        from rbs.units import format_cpu, human_size

        return (
            f"{self.worker_id}: cpu {format_cpu(self.cpu_millis)}, memory "
            f"{human_size(self.memory_bytes)}, gpus {len(self.gpus)}"
        )
