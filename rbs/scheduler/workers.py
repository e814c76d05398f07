"""Worker job-slot accounting: free resources, concrete GPU ids, rendezvous ports, best fit."""

from __future__ import annotations

from rbs.model import Resources
from rbs.scheduler.instructions import NodeRecord, WorkerRecord

NodeKey = tuple[int, int | None, int, int]  # job id, index, attempt, rank


class WorkerCapacity:
    """One worker's capacity and what is allocated on it, node by node."""

    __slots__ = (
        "address",
        "alive",
        "allocs",
        "cpu_millis",
        "free_cpu",
        "free_gpus",
        "free_mem",
        "free_slots",
        "gpus",
        "hostname",
        "job_slots",
        "last_seen",
        "master_ports",
        "memory_bytes",
        "reachable",
        "used_ports",
        "worker_id",
    )

    def __init__(self, rec: WorkerRecord, now: float) -> None:
        self.worker_id = rec.worker_id
        self.allocs: dict[NodeKey, NodeRecord] = {}
        self.used_ports: set[int] = set()
        self.last_seen = now
        # Not journaled: whether the server can reach the worker now. A worker whose
        # stream broke keeps its runs until `heartbeat_timeout` (their lease may outlive
        # the outage) but takes no new ones; a restored worker starts out reachable.
        self.reachable = True
        self.reconfigure(rec)

    def reconfigure(self, rec: WorkerRecord) -> None:
        """Take new capacity figures, keeping current allocations."""
        self.hostname = rec.hostname
        self.address = rec.address or rec.hostname
        self.cpu_millis = rec.cpu_millis
        self.memory_bytes = rec.memory_bytes
        self.gpus = rec.gpus
        self.job_slots = rec.job_slots
        self.master_ports = rec.master_ports
        self.alive = rec.alive
        used_gpus = {g for a in self.allocs.values() for g in a.gpus}
        self.free_gpus = [g for g in self.gpus if g not in used_gpus]
        self.free_cpu = self.cpu_millis - sum(a.cpu_millis for a in self.allocs.values())
        self.free_mem = self.memory_bytes - sum(a.memory_bytes for a in self.allocs.values())
        self.free_slots = self.job_slots - len(self.allocs)

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
        self.free_cpu -= node.cpu_millis
        self.free_mem -= node.memory_bytes
        self.free_slots -= 1
        for g in node.gpus:
            if g in self.free_gpus:
                self.free_gpus.remove(g)
        if node.master_port is not None:
            self.used_ports.add(node.master_port)

    def release(self, key: NodeKey) -> NodeRecord | None:
        node = self.allocs.pop(key, None)
        if node is None:
            return None
        self.free_cpu += node.cpu_millis
        self.free_mem += node.memory_bytes
        self.free_slots += 1
        if node.gpus:
            # Keep the worker's own order so the next pin is deterministic.
            back = set(self.free_gpus) | set(node.gpus)
            self.free_gpus = [g for g in self.gpus if g in back]
        if node.master_port is not None:
            self.used_ports.discard(node.master_port)
        return node

    def size_text(self) -> str:
        from rbs.units import format_cpu, format_size

        return (
            f"{self.worker_id}: cpu {format_cpu(self.cpu_millis)}, memory "
            f"{format_size(self.memory_bytes)}, gpus {len(self.gpus)}"
        )
