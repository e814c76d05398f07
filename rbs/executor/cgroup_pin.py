"""Joblet's resource flags in cgroups: cpuset pinning and per-device I/O throttling.

`--cpu-cores 0-3,6` becomes `cpuset.cpus` (v1 and v2 spell it alike). `--max-iobps N`
becomes, on the block device that holds the job's folder, v1's
`blkio.throttle.read_bps_device` and `write_bps_device` ("MAJ:MIN N") or v2's `io.max`
("MAJ:MIN rbps=N wbps=N"). v1 throttles only I/O that reaches the device unbuffered
(O_DIRECT, or a buffered write once it is flushed by fsync): page-cache writeback is not
charged to the group. A folder on tmpfs or overlayfs has no block device, and its job
runs unthrottled, saying so in its log.
"""

from __future__ import annotations

import os
from pathlib import Path

from rbs.executor.cgroup_base import CgroupError, CgroupFs, Limits


def block_device(path: str) -> tuple[str | None, str]:
    """The whole-disk "MAJ:MIN" holding `path` (a partition's disk), or None and why."""
    try:
        dev = os.stat(path).st_dev
    except OSError as e:
        return None, f"cannot stat {path}: {e.strerror}"
    major, minor = os.major(dev), os.minor(dev)
    if major == 0:
        return None, f"{path} is on a filesystem with no block device (tmpfs, overlay)"
    sys_dev = Path(f"/sys/dev/block/{major}:{minor}")
    if (sys_dev / "partition").exists():  # throttling applies to the whole disk
        with_disk = (sys_dev.resolve().parent / "dev").read_text().strip()
        return with_disk, ""
    return f"{major}:{minor}", ""


def write_v1(fs: CgroupFs, groups: dict[str, Path], limits: Limits) -> None:
    cpuset = groups.get("cpuset")
    if limits.cpu_set is not None and cpuset is not None:
        inherit_cpuset(fs, cpuset.parent)
        fs.write(cpuset / "cpuset.mems", fs.read(cpuset.parent / "cpuset.mems").strip())
        fs.write(cpuset / "cpuset.cpus", limits.cpu_set)
    blkio = groups.get("blkio")
    if limits.io_bps is not None and limits.io_device is not None and blkio is not None:
        for kind in ("read", "write"):
            fs.write(
                blkio / f"blkio.throttle.{kind}_bps_device", f"{limits.io_device} {limits.io_bps}"
            )


def write_v2(fs: CgroupFs, path: Path, limits: Limits, controllers: frozenset[str]) -> None:
    if limits.cpu_set is not None and "cpuset" in controllers:
        fs.write(path / "cpuset.cpus", limits.cpu_set)
    if limits.io_bps is not None and limits.io_device is not None and "io" in controllers:
        fs.write(path / "io.max", f"{limits.io_device} rbps={limits.io_bps} wbps={limits.io_bps}")


def inherit_cpuset(fs: CgroupFs, group: Path, depth: int = 8) -> None:
    """Give `group` (and empty ancestors) its parent's cpus and mems: a v1 cpuset group
    starts with none, and takes no task until both are set."""
    chain = [group]
    for _ in range(depth):
        if fs.read(chain[-1] / "cpuset.cpus").strip():
            break
        chain.append(chain[-1].parent)
    else:
        raise CgroupError(f"no cpus in the cpuset groups above {group}")
    for parent, child in zip(reversed(chain), list(reversed(chain))[1:], strict=False):
        for name in ("cpuset.cpus", "cpuset.mems"):
            if not fs.read(child / name).strip():
                fs.write(child / name, fs.read(parent / name).strip())


def optional_controllers(limits: Limits) -> set[str]:
    """The v1 controllers a job's group is made in only when its limits use them."""
    return {
        c
        for c, used in (
            ("cpuset", limits.cpu_set is not None),
            ("blkio", limits.io_bps is not None and limits.io_device is not None),
        )
        if not used
    }
