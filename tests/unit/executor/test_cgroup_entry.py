"""Where a spawning thread stands so that a job is born in its cgroup, and its way back."""

from __future__ import annotations

from pathlib import Path

import pytest

from rbs.executor.cgroup_base import CgroupError, CgroupFs, NullCgroup, Step
from rbs.executor.cgroup_v1 import V1Cgroup
from rbs.executor.cgroup_v2 import V2Cgroup
from rbs.executor.cgroups import HybridCgroup, detect
from rbs.executor.supervisor_spawn import standing_in


class Recorder(CgroupFs):
    """Records writes; refuses those to the files in `refuse`."""

    def __init__(self, refuse: set[Path] | None = None) -> None:
        self.writes: list[tuple[Path, str]] = []
        self.refuse = refuse or set()

    def write(self, path: Path, value: str) -> None:
        if path in self.refuse:
            raise CgroupError(f"cannot write {value!r} to {path}: refused")
        self.writes.append((path, value))


MEM = Path("/cg/memory/own/rbs/w/job-1")
CPU = Path("/cg/cpu/rbs/w/job-1")
HOMES = {"memory": Path("/cg/memory/own"), "cpu": Path("/cg/cpu")}


def test_v1_groups_take_the_thread_through_each_hierarchys_tasks_file() -> None:
    group = V1Cgroup(Recorder(), {"memory": MEM, "cpu": CPU}, (), HOMES)
    assert group.entry() == (
        Step(CPU / "tasks", Path("/cg/cpu/tasks")),
        Step(MEM / "tasks", Path("/cg/memory/own/tasks")),
    )
    # Co-mounted controllers share one group: one step.
    both = V1Cgroup(
        Recorder(),
        {"cpu": CPU, "cpuacct": CPU},
        (),
        {"cpu": HOMES["cpu"]} | {"cpuacct": HOMES["cpu"]},
    )
    assert both.entry() == (Step(CPU / "tasks", Path("/cg/cpu/tasks")),)


@pytest.mark.parametrize("controller", ["pids", "cpuset"])
def test_v1_groups_with_a_pids_limit_or_pinned_cores_join_by_pid(controller: str) -> None:
    groups = {"memory": MEM, controller: Path(f"/cg/{controller}/rbs/w/job-1")}
    homes = {**HOMES, controller: Path(f"/cg/{controller}")}
    assert V1Cgroup(Recorder(), groups, (), homes).entry() is None
    assert V1Cgroup(Recorder(), {"memory": MEM}, ()).entry() is None  # no homes known


def test_v2_groups_take_the_whole_process_only_without_controllers() -> None:
    path, home = Path("/cg/unified/rbs/w/job-1"), Path("/cg/unified")
    bare = V2Cgroup(Recorder(), path, frozenset(), home=home)
    assert bare.entry() == (Step(path / "cgroup.procs", home / "cgroup.procs", process=True),)
    limited = V2Cgroup(Recorder(), path, frozenset({"memory"}), home=home)
    assert limited.entry() is None
    hybrid = HybridCgroup(V1Cgroup(Recorder(), {"memory": MEM}, (), HOMES), bare)
    assert hybrid.entry() == (
        Step(MEM / "tasks", Path("/cg/memory/own/tasks")),
        Step(path / "cgroup.procs", home / "cgroup.procs", process=True),
    )
    assert NullCgroup("none").entry() == ()


def test_standing_in_enters_then_goes_back_in_reverse() -> None:
    fs = Recorder()
    steps = HybridCgroup(
        V1Cgroup(fs, {"memory": MEM}, (), HOMES),
        V2Cgroup(fs, Path("/cg/u/job"), frozenset(), home=Path("/cg/u")),
    ).entry()
    assert steps is not None
    with standing_in(fs, steps):
        assert fs.writes == [(MEM / "tasks", "0"), (Path("/cg/u/job/cgroup.procs"), "0")]
    assert fs.writes[2:] == [(Path("/cg/u/cgroup.procs"), "0"), (HOMES["memory"] / "tasks", "0")]


def test_a_refused_entry_goes_back_from_where_it_got_and_raises() -> None:
    fs = Recorder(refuse={CPU / "tasks"})
    steps = V1Cgroup(fs, {"memory": MEM, "cpu": CPU}, (), HOMES).entry()
    assert steps is not None
    with pytest.raises(CgroupError, match="refused"), standing_in(fs, steps):
        raise AssertionError("not reached")
    assert fs.writes == []  # cpu (first) refused: nothing entered, nothing to undo
    fs = Recorder(refuse={MEM / "tasks"})
    with pytest.raises(CgroupError), standing_in(fs, steps):
        raise AssertionError("not reached")
    assert fs.writes == [(CPU / "tasks", "0"), (Path("/cg/cpu/tasks"), "0")]


def test_detect_knows_the_processs_own_groups(tmp_path: Path) -> None:
    lines = [f"35 25 0:30 / {tmp_path / 'unified'} rw - cgroup2 cgroup2 rw"]
    for i, c in enumerate(("memory", "cpu")):
        (tmp_path / c).mkdir()
        lines.append(f"3{i} 31 0:2{i} / {tmp_path / c} rw - cgroup cgroup rw,{c}")
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified" / "cgroup.controllers").write_text("")
    (tmp_path / "memory" / "process_api").mkdir()
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("\n".join(lines) + "\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("4:memory:/process_api\n2:cpu:/\n0::/\n")

    class Dirs(CgroupFs):
        def write(self, path: Path, value: str) -> None:
            pass

    backend = detect(fs=Dirs(), mountinfo=mountinfo, proc_cgroup=proc, scope="w1")
    assert isinstance(backend.v1.homes, dict)  # type: ignore[attr-defined]
    assert backend.v1.homes == {  # type: ignore[attr-defined]
        "memory": tmp_path / "memory" / "process_api",
        "cpu": tmp_path / "cpu",
    }
    assert backend.v2.home == tmp_path / "unified"  # type: ignore[attr-defined]
