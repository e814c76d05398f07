"""Telemetry samples read from a job's cgroup files, and GPUs only where NVML answers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rbs.executor.cgroup_base import CgroupFs, NullCgroup
from rbs.executor.cgroup_v1 import V1Cgroup
from rbs.executor.cgroup_v2 import V2Cgroup
from rbs.executor.telemetry import Gpus, Sampler, cgroup_sample, interval_from_env, parse
from rbs.wire.logs import TELEMETRY_PREFIX


def files(folder: Path, **contents: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in contents.items():
        (folder / name.replace("__", ".")).write_text(text)
    return folder


def test_v2_sample_reads_cpu_memory_peak_and_io(tmp_path: Path) -> None:
    group = files(
        tmp_path / "job",
        cpu__stat="usage_usec 2500000\nuser_usec 2000000\n",
        memory__current="1048576\n",
        memory__peak="4194304\n",
        io__stat="8:0 rbytes=100 wbytes=200 rios=1 wios=2\n8:16 rbytes=1 wbytes=2\n",
    )
    cg = V2Cgroup(CgroupFs(), group, frozenset({"memory", "io", "cpu"}))
    assert cgroup_sample(cg) == {
        "cpu_s": 2.5,
        "mem": 1048576,
        "mem_peak": 4194304,
        "io_read": 101,
        "io_write": 202,
    }


def test_v1_sample_reads_memory_cpuacct_and_blkio(tmp_path: Path) -> None:
    mem = files(
        tmp_path / "memory", memory__usage_in_bytes="300\n", memory__max_usage_in_bytes="900\n"
    )
    acct = files(tmp_path / "cpuacct", cpuacct__usage="1500000000\n")
    blkio = files(
        tmp_path / "blkio",
        blkio__throttle__io_service_bytes="8:0 Read 10\n8:0 Write 20\n8:0 Total 30\nTotal 30\n",
    )
    cg = V1Cgroup(CgroupFs(), {"memory": mem, "cpuacct": acct, "blkio": blkio}, ())
    assert cgroup_sample(cg) == {
        "cpu_s": 1.5,
        "mem": 300,
        "mem_peak": 900,
        "io_read": 10,
        "io_write": 20,
    }
    # Without a blkio group (a job that caps no I/O) the sample has no I/O fields.
    assert "io_read" not in cgroup_sample(V1Cgroup(CgroupFs(), {"memory": mem}, ()))


def test_a_run_without_a_cgroup_samples_only_its_time() -> None:
    text = Sampler(1.0).sample("L1", NullCgroup("none"), (), since=0)
    rec = parse(text)
    assert rec is not None and set(rec) == {"t"}


def test_no_gpu_fields_when_nvml_is_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    group = files(tmp_path / "job", cpu__stat="usage_usec 1000000\n")
    sampler = Sampler(1.0)
    rec = parse(sampler.sample("L1", V2Cgroup(CgroupFs(), group, frozenset()), ("0", "1"), 0))
    assert rec is not None and "gpus" not in rec and rec["cpu_s"] == 1.0


def test_pinned_gpus_are_sampled_by_index_or_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    class FakeNvml:
        def nvmlInit(self) -> None:
            pass

        def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
            seen.append(i)
            return i

        def nvmlDeviceGetHandleByUUID(self, u: str) -> Any:
            if u != "GPU-abc":
                raise RuntimeError("no such GPU")
            seen.append(u)
            return 7

        def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
            return SimpleNamespace(gpu=50 + h)

        def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
            return SimpleNamespace(used=1000 * (h + 1))

    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    got = Gpus().sample(["1", "GPU-abc", "GPU-gone"])
    assert got == [{"id": "1", "util": 51, "mem": 2000}, {"id": "GPU-abc", "util": 57, "mem": 8000}]
    assert Gpus().sample([]) == []


def test_cpu_is_cores_used_since_the_previous_sample(tmp_path: Path) -> None:
    group = files(tmp_path / "job", cpu__stat="usage_usec 0\n")
    cg = V2Cgroup(CgroupFs(), group, frozenset())
    sampler = Sampler(1.0)
    first = json.loads(sampler.sample("L1", cg, (), since=0)[len(TELEMETRY_PREFIX) :])
    assert first["cpu"] == 0.0
    (group / "cpu.stat").write_text("usage_usec 5000000000\n")  # 5000 s of CPU since
    second = parse(sampler.sample("L1", cg, (), since=0))
    assert second is not None and second["cpu"] > 0 and second["cpu_s"] == 5000.0


def test_the_interval_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RBS_TELEMETRY_INTERVAL", "0.5")
    assert interval_from_env() == 0.5
    monkeypatch.setenv("RBS_TELEMETRY_INTERVAL", "soon")
    assert interval_from_env() == 15.0
    monkeypatch.setenv("RBS_TELEMETRY_INTERVAL", "0")
    sampler = Sampler(interval_from_env())
    assert sampler.next_at is None and not sampler.due(1e12)
