"""Which starts the supervisor's loop makes itself, and which go to a spawn thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rbs.executor.cgroup_base import CgroupBackend, JobCgroup, Limits, NullBackend, NullCgroup
from rbs.executor.cgroup_pool import CgroupPool
from rbs.executor.cgroup_v2 import V2Backend
from rbs.executor.supervisor_proto import RunSpec
from rbs.executor.supervisor_start import start_here


class Keepable(NullCgroup):
    def recycle(self) -> bool:
        return True


class Groups(CgroupBackend):
    """Hands out groups that can be kept."""

    name = "test"

    def create(self, key: str, limits: Limits) -> JobCgroup:
        return Keepable("test")

    def describe(self) -> str:
        return "test"

    def sweep(self) -> list[Path]:
        return []


def _spec(**kw: Any) -> RunSpec:
    return RunSpec(
        lease_id="1.1.0", argv=("true",), env={}, cwd="/", spool="/x", key="k", grace_s=1, **kw
    )


def test_a_kept_group_or_none_is_started_on_the_loop() -> None:
    pool = CgroupPool(Groups())
    assert not start_here(pool, _spec())  # no kept group yet: a mkdir to wait for
    pool.release(pool.create("k", Limits()), empty=True)
    assert start_here(pool, _spec())
    assert start_here(CgroupPool(NullBackend("none here")), _spec())


def test_what_needs_the_shim_or_a_group_of_its_own_goes_to_a_spawn_thread() -> None:
    pool = CgroupPool(Groups())
    pool.release(pool.create("k", Limits()), empty=True)
    for kw in (
        {"pids_max": 10},
        {"users": {"first": 1, "last": 2}},
        {"cpu_set": (0,)},
        {"io_bps": 1 << 20},
    ):
        assert not start_here(pool, _spec(**kw)), kw
    limited = CgroupPool(V2Backend(Path("/cg/rbs/w"), frozenset({"memory"})))
    assert not start_here(limited, _spec())  # joined by pid through the shim
