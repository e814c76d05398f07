"""Telemetry of running jobs: one timer in the run supervisor samples every run it holds.

Every `interval_s` (15 s; `rbs remote worker --telemetry-interval`, which reaches the
supervisor as RBS_TELEMETRY_INTERVAL; 0 turns sampling off) each started, not yet ended
run gets one sample read from its cgroup: CPU (cores used since the last sample, and the
cumulative seconds), memory now and its peak, the bytes read and written (v2 io.stat; v1
only when the job has a blkio group, i.e. caps its I/O), and per pinned GPU its use and
memory through NVML (`nvidia-ml-py`, imported on first use; without it or without a
driver the sample simply has no `gpus`). The sample is one SYS line of the run's log,
`TELEMETRY_PREFIX` + JSON, so it is spooled and shipped with the run's other lines;
the server stores such lines apart, as telemetry (rbs.server.telemetry), never as log.
No thread: the supervisor's loop asks `due` on each pass and wakes for `next_at`.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from rbs.executor.cgroup_base import CgroupError, JobCgroup, read_int
from rbs.executor.cgroup_v1 import V1Cgroup
from rbs.executor.cgroup_v2 import V2Cgroup
from rbs.executor.cgroups import HybridCgroup
from rbs.wire.logs import TELEMETRY_PREFIX

log = logging.getLogger(__name__)

INTERVAL_ENV = "RBS_TELEMETRY_INTERVAL"
DEFAULT_INTERVAL_S = 15.0


def interval_from_env() -> float:
    """The sampling interval the worker asked for (0: none); a bad value is the default."""
    text = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(text) if text else DEFAULT_INTERVAL_S
    except ValueError:
        log.warning(
            "%s=%r is not a number of seconds; sampling every %gs",
            INTERVAL_ENV,
            text,
            DEFAULT_INTERVAL_S,
        )
        return DEFAULT_INTERVAL_S
    return max(0.0, value)


def _v1_io(cg: V1Cgroup) -> tuple[int, int] | None:
    blkio = cg.groups.get("blkio")
    if blkio is None:
        return None
    path = blkio / "blkio.throttle.io_service_bytes"
    if not cg.fs.exists(path):
        return None
    read = write = 0
    for line in cg.fs.read(path).splitlines():
        parts = line.split()  # "MAJ:MIN Read N" ... and a last "Total N"
        if len(parts) == 3 and parts[2].isdigit():
            if parts[1] == "Read":
                read += int(parts[2])
            elif parts[1] == "Write":
                write += int(parts[2])
    return read, write


def _v2_io(cg: V2Cgroup) -> tuple[int, int] | None:
    path = cg.path / "io.stat"
    if not cg.fs.exists(path):
        return None
    read = write = 0
    for line in cg.fs.read(path).splitlines():  # "MAJ:MIN rbytes=N wbytes=N rios=N ..."
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if value.isdigit():
                if key == "rbytes":
                    read += int(value)
                elif key == "wbytes":
                    write += int(value)
    return read, write


def _memory_and_io(cg: JobCgroup) -> tuple[int | None, tuple[int, int] | None]:
    """Memory in use now, and (read, written) bytes, where the cgroup accounts them."""
    if isinstance(cg, HybridCgroup):  # v1 accounts; v2 (no controllers) only tracks
        mem, io = _memory_and_io(cg.v1)
        if mem is None or io is None:
            mem2, io2 = _memory_and_io(cg.v2)
            mem, io = mem if mem is not None else mem2, io or io2
        return mem, io
    if isinstance(cg, V1Cgroup):
        group = cg.groups.get("memory")
        mem = None if group is None else read_int(cg.fs, group / "memory.usage_in_bytes")
        return mem, _v1_io(cg)
    if isinstance(cg, V2Cgroup):
        mem = read_int(cg.fs, cg.path / "memory.current") if "memory" in cg.controllers else None
        return mem, _v2_io(cg)
    return None, None


def cgroup_sample(cg: JobCgroup) -> dict[str, Any]:
    """cpu_s, mem, mem_peak, io_read, io_write of a job's cgroup, those it can tell."""
    out: dict[str, Any] = {}
    try:
        usage = cg.usage()
        if usage.cpu_time_s is not None:
            out["cpu_s"] = round(usage.cpu_time_s, 3)
        mem, io = _memory_and_io(cg)
        if mem is not None:
            out["mem"] = mem
        if usage.peak_memory_bytes is not None:
            out["mem_peak"] = max(usage.peak_memory_bytes, mem or 0)
        if io is not None:
            out["io_read"], out["io_write"] = io
    except (CgroupError, OSError, ValueError) as e:
        log.debug("cannot read the cgroup %s: %s", cg.description, e)
    return out


class Gpus:
    """NVML, loaded on first use; `available` False (and no samples) without it."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._tried = False

    def _load(self) -> Any:
        if not self._tried:
            self._tried = True
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception as e:  # ImportError, or NVMLError: no driver, no GPU
                log.info("no GPU telemetry: %s", e)
        return self._nvml

    def sample(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Use (%) and memory (bytes) of each GPU, by the ids the worker pins (an index
        or a UUID); a GPU NVML cannot read is left out."""
        nvml = self._load() if ids else None
        if nvml is None:
            return []
        out = []
        for gpu_id in ids:
            try:
                if gpu_id.isdigit():
                    handle = nvml.nvmlDeviceGetHandleByIndex(int(gpu_id))
                else:
                    handle = nvml.nvmlDeviceGetHandleByUUID(gpu_id)
                util = nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                out.append({"id": gpu_id, "util": int(util.gpu), "mem": int(mem.used)})
            except Exception as e:
                log.debug("GPU %s: %s", gpu_id, e)
        return out


class Sampler:
    """The one timer: `due(now)` on each loop pass, then `sample` for each running run."""

    def __init__(self, interval_s: float, gpus: Gpus | None = None) -> None:
        self.interval_s = interval_s
        self.next_at: float | None = time.monotonic() + interval_s if interval_s > 0 else None
        self.gpus = gpus or Gpus()
        self._last: dict[str, tuple[float, float]] = {}  # lease -> (time, cpu_s)

    def due(self, now: float) -> bool:
        if self.next_at is None or now < self.next_at:
            return False
        self.next_at = now + self.interval_s
        return True

    def sample(self, lease_id: str, cg: JobCgroup, gpu_ids: Sequence[str], since: float) -> str:
        """One run's sample as its log line's text; `since` is when it started (epoch)."""
        now = time.time()
        rec: dict[str, Any] = {"t": round(now, 3)}
        rec.update(cgroup_sample(cg))
        cpu_s = rec.get("cpu_s")
        if cpu_s is not None:
            then, before = self._last.get(lease_id, (since, 0.0))
            if now > then:
                rec["cpu"] = round(max(0.0, cpu_s - before) / (now - then), 3)
            self._last[lease_id] = (now, cpu_s)
        gpus = self.gpus.sample(gpu_ids)
        if gpus:
            rec["gpus"] = gpus
        return TELEMETRY_PREFIX + json.dumps(rec, separators=(",", ":"))

    def forget(self, live: Iterable[str]) -> None:
        """Drop what is kept of runs no longer held."""
        keep = set(live)
        for lease in [k for k in self._last if k not in keep]:
            del self._last[lease]


def parse(text: str) -> dict[str, Any] | None:
    """A sample line's record, or None when `text` is not one."""
    if not text.startswith(TELEMETRY_PREFIX):
        return None
    try:
        rec = json.loads(text[len(TELEMETRY_PREFIX) :])
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None
