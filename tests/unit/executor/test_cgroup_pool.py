"""Job cgroups kept for reuse: who gets a kept group, and what its next job reads."""

from __future__ import annotations

from pathlib import Path

from test_cgroup_backends import FakeKernel, hybrid_layout, v2_root

from rbs.executor.cgroup_base import Limits
from rbs.executor.cgroup_pool import CgroupPool
from rbs.executor.cgroup_v2 import prepare_v2
from rbs.executor.cgroups import HybridBackend, HybridCgroup, detect

LIMITS = Limits(cpus=0.5, memory_bytes=64 << 20)


def _hybrid(tmp_path: Path) -> tuple[FakeKernel, CgroupPool]:
    fs, mi, cg = hybrid_layout(tmp_path)
    inner = detect(fs=fs, mountinfo=mi, proc_cgroup=cg, scope="w1")
    assert isinstance(inner, HybridBackend)
    return fs, CgroupPool(inner, size=2)


def _ran(group: HybridCgroup, *, cpu_ns: int, charged: int = 4096, oom: int = 0) -> None:
    """What the kernel would show once a job ran in `group` and ended."""
    mem = group.v1.groups["memory"]
    (mem / "memory.max_usage_in_bytes").write_text(f"{50 << 20}\n")
    (mem / "memory.usage_in_bytes").write_text(f"{charged}\n")
    (mem / "memory.oom_control").write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {oom}\n")
    (group.v2.path / "cpu.stat").write_text(f"usage_usec {cpu_ns // 1000}\nuser_usec 0\n")


def test_an_empty_group_is_reused_with_its_counters_from_zero(tmp_path: Path) -> None:
    fs, pool = _hybrid(tmp_path)
    first = pool.create("job-1", LIMITS)
    assert isinstance(first, HybridCgroup)
    _ran(first, cpu_ns=2_000_000_000, oom=1)
    used = first.usage()
    assert (used.cpu_time_s, used.oom_kills) == (2.0, 1)
    pool.release(first, empty=True)
    assert pool.idle() == 1 and all(p.exists() for p in first.v1.groups.values())
    again = pool.create("job-2", LIMITS)
    assert again is first and pool.reused == 1
    mem = again.v1.groups["memory"]
    assert (mem / "memory.max_usage_in_bytes").read_text() == "0"  # the peak was reset
    fresh = again.usage()
    assert (fresh.cpu_time_s, fresh.oom_kills) == (0.0, 0)
    _ran(again, cpu_ns=2_500_000_000, oom=1)
    assert (again.usage().cpu_time_s, again.usage().oom_kills) == (0.5, 0)
    # Its limits were written once, when it was made; its cpu quota again for each next
    # job (the kernel refills the bandwidth a group's last job used up).
    limit_writes = [p for p, _ in fs.writes if p.name == "memory.limit_in_bytes"]
    assert len(limit_writes) == 1
    quota_writes = [v for p, v in fs.writes if p.name == "cpu.cfs_quota_us"]
    assert quota_writes == ["50000", "50000"]


def test_groups_left_with_processes_or_charged_memory_are_removed(tmp_path: Path) -> None:
    _, pool = _hybrid(tmp_path)
    busy = pool.create("job-1", LIMITS)
    assert isinstance(busy, HybridCgroup)
    _ran(busy, cpu_ns=1)
    busy.usage()
    pool.release(busy, empty=False)  # something was left running: killed, removed
    assert not busy.v2.path.exists() and pool.idle() == 0
    cached = pool.create("job-2", LIMITS)
    assert isinstance(cached, HybridCgroup)
    _ran(cached, cpu_ns=1, charged=64 << 20)  # the page cache of files it wrote
    cached.usage()
    pool.release(cached, empty=True)
    assert not cached.v2.path.exists() and pool.idle() == 0
    below = pool.create("job-3", LIMITS)
    assert isinstance(below, HybridCgroup)
    _ran(below, cpu_ns=1)
    below.usage()
    # A process in a group the job made below its own: cgroup.procs does not list it.
    (below.v2.path / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    pool.release(below, empty=True)
    assert pool.idle() == 0


def test_other_limits_pinning_and_a_full_pool_get_groups_of_their_own(tmp_path: Path) -> None:
    _, pool = _hybrid(tmp_path)
    groups = [pool.create(f"job-{i}", LIMITS) for i in range(3)]
    for g in groups:
        assert isinstance(g, HybridCgroup)
        _ran(g, cpu_ns=1)
        g.usage()
        pool.release(g, empty=True)
    assert pool.idle() == 2  # the pool's size; the third was removed
    other = pool.create("job-9", Limits(cpus=1.0, memory_bytes=64 << 20))
    assert other not in groups
    pinned = pool.create("job-10", Limits(cpu_set="0", cpus=0.5, memory_bytes=64 << 20))
    assert pinned not in groups
    pool.drain()
    assert pool.idle() == 0
    assert all(not g.v2.path.exists() for g in groups if isinstance(g, HybridCgroup))


def test_v2_with_the_memory_controller_is_never_reused(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    pool = CgroupPool(prepare_v2(fs, root, scope="w1", move_self=False))
    group = pool.create("job-1", LIMITS)
    group.usage()
    pool.release(group, empty=True)
    assert pool.idle() == 0 and pool.create("job-2", LIMITS) is not group
