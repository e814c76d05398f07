"""Each cgroup backend's file writing and reading, against a folder that emulates cgroupfs."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest

from rbs.executor.cgroup_base import (
    CgroupError,
    CgroupFs,
    Limits,
    NullBackend,
    group_name,
    remove_groups,
)
from rbs.executor.cgroup_v1 import V1Backend
from rbs.executor.cgroup_v2 import V2Backend, prepare_v2
from rbs.executor.cgroups import (
    HybridBackend,
    HybridCgroup,
    detect,
    parse_mountinfo,
    parse_proc_cgroup,
)

V1_FILES = {
    "memory": {
        "memory.limit_in_bytes": "9223372036854771712",
        "memory.memsw.limit_in_bytes": "9223372036854771712",
        "memory.max_usage_in_bytes": "0",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    },
    "cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "-1"},
    "cpuacct": {"cpuacct.usage": "0"},
    "pids": {"pids.max": "max"},
}


class FakeKernel(CgroupFs):
    """A tmp folder that behaves like cgroupfs where rbs depends on it: new groups get
    their control files, writes need an existing file, cgroup.procs moves a pid,
    subtree_control refuses a group holding processes, rmdir refuses a populated group."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.writes: list[tuple[Path, str]] = []

    def _hierarchy(self, path: Path) -> str:
        return path.relative_to(self.root).parts[0]

    def mkdir(self, path: Path) -> None:
        path.mkdir()
        h = self._hierarchy(path)
        (path / "cgroup.procs").write_text("")
        if h == "unified":
            enabled = (path.parent / "cgroup.subtree_control").read_text().split()
            (path / "cgroup.controllers").write_text(" ".join(enabled))
            (path / "cgroup.subtree_control").write_text("")
            (path / "cgroup.events").write_text("populated 0\nfrozen 0\n")
            (path / "cgroup.kill").write_text("")
            (path / "cpu.stat").write_text("usage_usec 0\nuser_usec 0\n")
            if "memory" in enabled:
                for name, value in {
                    "memory.max": "max",
                    "memory.swap.max": "max",
                    "memory.peak": "0",
                    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
                }.items():
                    (path / name).write_text(value)
            if "cpu" in enabled:
                (path / "cpu.max").write_text("max 100000")
            if "pids" in enabled:
                (path / "pids.max").write_text("max")
        else:
            for name, value in V1_FILES.get(h, {}).items():
                (path / name).write_text(value)

    def rmdir(self, path: Path) -> None:
        if (path / "cgroup.procs").read_text().split():
            raise OSError(errno.EBUSY, "Device or resource busy", str(path))
        for f in path.iterdir():
            f.unlink()
        path.rmdir()

    def write(self, path: Path, value: str) -> None:
        if not path.exists():
            raise CgroupError(f"cannot open {path} to write {value!r}: No such file", errno.ENOENT)
        self.writes.append((path, value))
        group = path.parent
        if path.name == "cgroup.subtree_control":
            if group != self.root / "unified" and (group / "cgroup.procs").read_text().split():
                raise CgroupError(f"cannot write {value!r} to {path}: busy", errno.EBUSY)
            current = set(path.read_text().split())
            avail = set((group / "cgroup.controllers").read_text().split())
            for tok in value.split():
                if tok[1:] not in avail:
                    raise CgroupError(f"cannot write {value!r} to {path}: ENOENT", errno.ENOENT)
                (current.add if tok[0] == "+" else current.discard)(tok[1:])
            path.write_text(" ".join(sorted(current)))
            return
        if path.name == "cgroup.procs":
            for other in (self.root / self._hierarchy(group)).rglob("cgroup.procs"):
                pids = [p for p in other.read_text().split() if p != value]
                other.write_text(" ".join(pids))
            path.write_text(f"{path.read_text()} {value}".strip())
            return
        limit = group / "memory.limit_in_bytes"
        if path.name == "memory.memsw.limit_in_bytes" and int(value) < int(limit.read_text()):
            raise CgroupError(f"cannot write {value!r} to {path}: EINVAL", errno.EINVAL)
        path.write_text(value)


def v2_root(tmp_path: Path, controllers: str = "cpu io memory pids") -> tuple[FakeKernel, Path]:
    fs = FakeKernel(tmp_path)
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers)
    # As systemd leaves it: the root delegates every controller to its children.
    (root / "cgroup.subtree_control").write_text(controllers)
    (root / "cgroup.procs").write_text("1 2 3")
    return fs, root


def read(path: Path) -> str:
    return path.read_text().strip()


# ---- v2 ------------------------------------------------------------------------------


def test_v2_delegates_controllers_and_writes_limits(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    fs.mkdir(root / "service")
    backend = prepare_v2(fs, root / "service")
    assert backend.controllers == {"cpu", "io", "memory", "pids"}
    group = backend.create("job-7.a1", Limits(cpus=0.5, memory_bytes=64 << 20, pids_max=50))
    assert group.path.parent == root / "service" / "rbs" / "default"
    assert read(root / "service" / "rbs" / "cgroup.subtree_control") == "cpu io memory pids"
    assert read(group.path / "memory.max") == str(64 << 20)
    assert read(group.path / "memory.swap.max") == "0"
    assert read(group.path / "cpu.max") == "50000 100000"
    assert read(group.path / "pids.max") == "50"
    assert group.notes == ()
    assert group.procs_files() == (group.path / "cgroup.procs",)


def test_v2_moves_worker_into_leaf_when_its_group_holds_it(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    own = root / "worker.service"
    fs.mkdir(own)
    fs.write(own / "cgroup.procs", str(os.getpid()))
    backend = prepare_v2(fs, own)
    assert read(own / "rbs-worker" / "cgroup.procs") == str(os.getpid())
    assert read(own / "cgroup.procs") == ""
    assert set(read(own / "cgroup.subtree_control").split()) == {"cpu", "io", "memory", "pids"}
    assert backend.controllers == {"cpu", "io", "memory", "pids"}


def test_v2_refuses_to_move_itself_when_told_not_to(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    own = root / "worker.service"
    fs.mkdir(own)
    fs.write(own / "cgroup.procs", str(os.getpid()))
    with pytest.raises(CgroupError, match="busy"):
        prepare_v2(fs, own, move_self=False)


def test_v2_usage_reads_peak_oom_and_cpu(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    group = prepare_v2(fs, root).create("j", Limits(memory_bytes=64 << 20))
    (group.path / "memory.peak").write_text("67108864\n")
    (group.path / "memory.events").write_text("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\n")
    (group.path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    u = group.usage()
    assert (u.peak_memory_bytes, u.oom_kills, u.cpu_time_s) == (64 << 20, 1, 2.5)


def test_v2_without_controllers_tracks_and_notes_unenforced_limits(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path, controllers="hugetlb")
    backend = prepare_v2(fs, root)
    group = backend.create("j", Limits(cpus=1, memory_bytes=1 << 30))
    assert backend.controllers == frozenset()
    assert not (group.path / "memory.max").exists()
    assert any("memory limit not enforced" in n for n in group.notes)
    assert group.usage().peak_memory_bytes is None


def test_v2_sigkill_uses_cgroup_kill(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    group = prepare_v2(fs, root).create("j", Limits())
    group.signal(signal.SIGKILL)
    assert read(group.path / "cgroup.kill") == "1"


def test_v2_sigterm_reaches_every_process_in_the_group(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    group = prepare_v2(fs, root).create("j", Limits())
    procs = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    try:
        for p in procs:
            group.join(p.pid)
        assert group.pids() == {p.pid for p in procs}
        assert group.signal(signal.SIGTERM) == 2
        assert [p.wait(timeout=10) for p in procs] == [-signal.SIGTERM] * 2
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_v2_failed_configuration_removes_the_group(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    backend = V2Backend(root / "rbs", frozenset({"memory"}), fs)
    fs.mkdir(root / "rbs")
    # The parent never enabled memory, so the new group has no memory.max to write.
    with pytest.raises(CgroupError, match=r"memory\.max"):
        backend.create("j", Limits(memory_bytes=1 << 30))
    assert [p.name for p in (root / "rbs").iterdir() if p.is_dir()] == []


# ---- v1 ------------------------------------------------------------------------------


def v1_backend(tmp_path: Path) -> tuple[FakeKernel, V1Backend]:
    fs = FakeKernel(tmp_path)
    bases = {}
    for c in ("memory", "cpu", "cpuacct", "pids"):
        (tmp_path / c / "process_api").mkdir(parents=True)
        (tmp_path / c / "process_api" / "cgroup.procs").write_text("")
        bases[c] = tmp_path / c / "process_api" / "rbs"
    return fs, V1Backend(bases, fs)


def test_v1_writes_limits_per_hierarchy_memsw_too(tmp_path: Path) -> None:
    fs, backend = v1_backend(tmp_path)
    group = backend.create("job/1 a", Limits(cpus=2.5, memory_bytes=64 << 20, pids_max=10))
    mem = group.groups["memory"]
    assert mem.parent == tmp_path / "memory" / "process_api" / "rbs"
    assert mem.name.startswith("job_1_a-")
    assert read(mem / "memory.limit_in_bytes") == str(64 << 20)
    assert read(mem / "memory.memsw.limit_in_bytes") == str(64 << 20)
    cpu = group.groups["cpu"]
    assert (read(cpu / "cpu.cfs_period_us"), read(cpu / "cpu.cfs_quota_us")) == ("100000", "250000")
    assert read(group.groups["pids"] / "pids.max") == "10"
    # limit_in_bytes must be written before memsw, which may never be below it.
    names = [p.name for p, _ in fs.writes]
    assert names.index("memory.limit_in_bytes") < names.index("memory.memsw.limit_in_bytes")
    assert len(group.procs_files()) == 4


def test_v1_usage_and_removal(tmp_path: Path) -> None:
    _, backend = v1_backend(tmp_path)
    group = backend.create("j", Limits(memory_bytes=64 << 20))
    mem = group.groups["memory"]
    (mem / "memory.max_usage_in_bytes").write_text("67104768\n")
    (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    (group.groups["cpuacct"] / "cpuacct.usage").write_text("1500000000\n")
    u = group.usage()
    assert (u.peak_memory_bytes, u.oom_kills, u.cpu_time_s) == (67104768, 3, 1.5)
    group.remove()
    assert not any(p.exists() for p in group.groups.values())


def test_v1_without_memory_hierarchy_notes_it(tmp_path: Path) -> None:
    fs, backend = v1_backend(tmp_path)
    backend = V1Backend({"cpu": backend.bases["cpu"]}, fs)
    group = backend.create("j", Limits(memory_bytes=64 << 20))
    assert group.notes == ("memory limit not enforced: no memory controller available",)
    assert group.usage().peak_memory_bytes is None


def test_remove_waits_for_a_busy_group(tmp_path: Path) -> None:
    class Busy(FakeKernel):
        tries = 0

        def rmdir(self, path: Path) -> None:
            self.tries += 1
            if self.tries < 3:
                raise OSError(errno.EBUSY, "busy", str(path))
            super().rmdir(path)

    fs = Busy(tmp_path)
    (tmp_path / "cpu").mkdir()
    fs.mkdir(tmp_path / "cpu" / "g")
    remove_groups(fs, [tmp_path / "cpu" / "g"])
    assert fs.tries == 3 and not (tmp_path / "cpu" / "g").exists()


# ---- detection -------------------------------------------------------------------------


def mountinfo(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "mountinfo"
    p.write_text("".join(line + "\n" for line in lines))
    return p


def proc_cgroup(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "cgroup"
    p.write_text("".join(line + "\n" for line in lines))
    return p


def test_parse_mountinfo_and_proc_cgroup() -> None:
    mounts = parse_mountinfo(
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "41 31 0:38 /ctr /x/my\\040cg rw shared:5 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    assert [(str(m.point), m.fstype, sorted(m.controllers)) for m in mounts] == [
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup", ["cpu", "cpuacct"]),
        ("/x/my cg", "cgroup2", []),
    ]
    assert mounts[1].root == "/ctr"
    v1, v2 = parse_proc_cgroup("4:memory:/process_api/x\n1:cpu,cpuacct:/\n0::/a/b\n")
    assert v1 == {"memory": "/process_api/x", "cpu": "/", "cpuacct": "/"} and v2 == "/a/b"


def test_detect_pure_v2(tmp_path: Path) -> None:
    fs, root = v2_root(tmp_path)
    fs.mkdir(root / "svc")
    backend = detect(
        fs=fs,
        mountinfo=mountinfo(tmp_path, [f"41 31 0:38 / {root} rw - cgroup2 cgroup2 rw"]),
        proc_cgroup=proc_cgroup(tmp_path, ["0::/svc"]),
    )
    assert isinstance(backend, V2Backend)
    assert backend.base == root / "svc" / "rbs" / "default"
    assert backend.controllers == {"cpu", "io", "memory", "pids"}


def test_detect_from_the_workers_leaf_uses_the_workers_group(tmp_path: Path) -> None:
    # The run supervisor is born in the leaf a worker moved itself into: its job groups
    # go where the worker's would.
    fs, root = v2_root(tmp_path)
    fs.mkdir(root / "svc")
    fs.mkdir(root / "svc" / "rbs-worker")
    backend = detect(
        fs=fs,
        mountinfo=mountinfo(tmp_path, [f"41 31 0:38 / {root} rw - cgroup2 cgroup2 rw"]),
        proc_cgroup=proc_cgroup(tmp_path, ["0::/svc/rbs-worker"]),
    )
    assert isinstance(backend, V2Backend)
    assert backend.base == root / "svc" / "rbs" / "default"


def hybrid_layout(tmp_path: Path) -> tuple[FakeKernel, Path, Path]:
    fs, root = v2_root(tmp_path, controllers="hugetlb")
    lines = [f"41 31 0:38 / {root} rw - cgroup2 cgroup2 rw"]
    for i, c in enumerate(("memory", "cpu", "cpuacct", "pids")):
        (tmp_path / c).mkdir()
        lines.append(f"3{i} 31 0:2{i} / {tmp_path / c} rw - cgroup cgroup rw,{c}")
    (tmp_path / "memory" / "process_api").mkdir()
    cg = proc_cgroup(tmp_path, ["4:memory:/process_api", "2:cpu:/", "3:cpuacct:/", "0::/"])
    return fs, mountinfo(tmp_path, lines), cg


def test_detect_hybrid_and_forced_kinds(tmp_path: Path) -> None:
    fs, mi, cg = hybrid_layout(tmp_path)
    backend = detect(fs=fs, mountinfo=mi, proc_cgroup=cg, scope="w1")
    assert isinstance(backend, HybridBackend)
    assert backend.v1.bases["memory"] == tmp_path / "memory" / "process_api" / "rbs" / "w1"
    assert backend.v2.base == tmp_path / "unified" / "rbs" / "w1"
    assert "pids" not in backend.v1.bases  # not in /proc/self/cgroup
    group = backend.create("j", Limits(memory_bytes=64 << 20))
    assert read(group.v1.groups["memory"] / "memory.limit_in_bytes") == str(64 << 20)
    assert group.procs_files()[0] == group.v2.path / "cgroup.procs"
    assert isinstance(detect("v1", fs=fs, mountinfo=mi, proc_cgroup=cg), V1Backend)
    assert isinstance(detect("v2", fs=fs, mountinfo=mi, proc_cgroup=cg), V2Backend)
    assert isinstance(detect("none", fs=fs, mountinfo=mi, proc_cgroup=cg), NullBackend)
    with pytest.raises(ValueError, match="unknown cgroup backend 'v3'"):
        detect("v3")
    with pytest.raises(ValueError, match=r"cgroup scope '\.\./x'"):
        detect(scope="../x")


def test_sweep_removes_only_its_own_scope(tmp_path: Path) -> None:
    fs, mi, cg = hybrid_layout(tmp_path)
    mine = detect(fs=fs, mountinfo=mi, proc_cgroup=cg, scope="w1")
    other = detect(fs=fs, mountinfo=mi, proc_cgroup=cg, scope="w2")
    assert isinstance(mine, HybridBackend) and isinstance(other, HybridBackend)
    left = [mine.create(f"j{i}", Limits()) for i in range(2)]
    kept = other.create("j9", Limits())
    swept = mine.sweep()
    # Per job: v1 memory and cpu (no pids limit; cpu time from v2's cpu.stat) + v2.
    assert len(swept) == 2 * 3
    assert not any(g.v2.path.exists() for g in left if isinstance(g, HybridCgroup))
    assert isinstance(kept, HybridCgroup) and kept.v2.path.exists()
    assert all(p.exists() for p in kept.v1.groups.values())


def test_detect_falls_back_to_none_when_nothing_is_writable(tmp_path: Path) -> None:
    class ReadOnly(FakeKernel):
        def mkdir(self, path: Path) -> None:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

    _, mi, cg = hybrid_layout(tmp_path)
    backend = detect(fs=ReadOnly(tmp_path), mountinfo=mi, proc_cgroup=cg)
    assert isinstance(backend, NullBackend)
    assert "no writable cgroup v1" in backend.reason and "root" in backend.reason
    group = backend.create("j", Limits(memory_bytes=64 << 20))
    assert group.notes == ("memory limit not enforced: no cgroup",)


def test_detect_without_cgroupfs(tmp_path: Path) -> None:
    backend = detect(
        mountinfo=mountinfo(tmp_path, ["1 0 0:1 / / rw - ext4 /dev/vda rw"]),
        proc_cgroup=proc_cgroup(tmp_path, []),
    )
    assert isinstance(backend, NullBackend)
    assert "no cgroup2 mount" in backend.describe()


def test_limits_and_names_are_validated() -> None:
    with pytest.raises(ValueError, match="below 1 MiB"):
        Limits(memory_bytes=64)
    with pytest.raises(ValueError, match="cpus must be > 0"):
        Limits(cpus=0)
    assert Limits(cpus=0.001).cpu_quota_us(100_000) == 1000
    a, b = group_name("job 1/../x"), group_name("job 1/../x")
    assert a != b and "/" not in a and not a.startswith(".")


class _DirFs(CgroupFs):
    """Plain folders: a new cpuset group has empty cpus and mems, as in the kernel."""

    def mkdir(self, path: Path) -> None:
        path.mkdir()
        if "cpuset" in path.parts:
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text("\n")

    def write(self, path: Path, value: str) -> None:
        path.write_text(value)


def test_v1_pins_cores_and_throttles_the_device_only_when_asked(tmp_path: Path) -> None:
    from rbs.executor.cgroup_v1 import V1Backend

    bases = {}
    for c in ("memory", "cpu", "cpuacct", "pids", "cpuset", "blkio"):
        base = tmp_path / c / "rbs"
        base.mkdir(parents=True)
        bases[c] = base
    (tmp_path / "cpuset" / "cpuset.cpus").write_text("0-3\n")
    (tmp_path / "cpuset" / "cpuset.mems").write_text("0\n")
    for name in ("cpuset.cpus", "cpuset.mems"):
        (bases["cpuset"] / name).write_text("\n")
    fs = _DirFs()
    backend = V1Backend(bases, fs)
    plain = backend.create("job-1", Limits(cpus=1.0))
    assert set(plain.groups) == {"memory", "cpu", "cpuacct"}  # pids only with a limit
    assert set(backend.create("job-3", Limits(pids_max=9)).groups) >= {"pids"}
    pinned = backend.create("job-2", Limits(cpu_set="1-2", io_bps=2 << 20, io_device="254:0"))
    cpuset, blkio = pinned.groups["cpuset"], pinned.groups["blkio"]
    assert (cpuset / "cpuset.cpus").read_text() == "1-2"
    assert (bases["cpuset"] / "cpuset.cpus").read_text() == "0-3"  # inherited, then narrowed
    assert (blkio / "blkio.throttle.write_bps_device").read_text() == "254:0 2097152"
    assert (blkio / "blkio.throttle.read_bps_device").read_text() == "254:0 2097152"
