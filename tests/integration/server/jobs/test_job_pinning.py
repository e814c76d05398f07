"""--cpu-cores and --max-iobps on a real worker: seen from inside the job and measured."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from jobs_harness import JobCluster, wait_for

from rbs.client.jobs import JobsClient
from rbs.executor.cgroup_pin import block_device

BLKIO = Path("/sys/fs/cgroup/blkio")
CPUSET = Path("/sys/fs/cgroup/cpuset")


def _out(client: JobsClient, job: str) -> list[str]:
    return [x.text for x in client.logs(job) if x.stream == "out"]


def _sys(client: JobsClient, job: str) -> list[str]:
    return [x.text for x in client.logs(job) if x.stream == "sys"]


@pytest.mark.skipif(
    not (CPUSET / "cpuset.cpus").exists() or len(os.sched_getaffinity(0)) < 2,
    reason="needs the v1 cpuset controller and two cores",
)
def test_cpu_cores_pin_the_job_as_seen_from_inside(cluster: JobCluster, client: JobsClient) -> None:
    core = max(os.sched_getaffinity(0))
    job = client.submit(
        ["sh", "-c", "grep Cpus_allowed_list /proc/self/status"], cpu_cores=str(core)
    )
    info = cluster.wait(job)
    assert (info.state, info.exit_code) == ("COMPLETED", 0), _sys(client, job)
    assert _out(client, job) == [f"Cpus_allowed_list:\t{core}"]
    assert any(f"cpu cores {core}" in t and t.startswith("limits:") for t in _sys(client, job))


@pytest.mark.skipif(
    not (CPUSET / "cpuset.cpus").exists() or len(os.sched_getaffinity(0)) < 2,
    reason="needs the v1 cpuset controller and two cores",
)
def test_an_unpinned_job_leaves_out_the_cores_a_pinned_one_holds(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    cores = sorted(os.sched_getaffinity(0))
    gate = tmp_path / "gate"
    pinned = client.submit(
        ["sh", "-c", f"echo up; while [ ! -e {gate} ]; do sleep 0.01; done"],
        cpu_cores=str(cores[-1]),
    )
    wait_for("the pinned job to run", lambda: "up" in _out(client, pinned))
    try:
        job = client.submit(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
        assert cluster.wait(job).state == "COMPLETED"
        (line,) = _out(client, job)
        allowed = line.split("\t")[1]
        assert str(cores[-1]) not in allowed.replace("-", ",").split(",")
    finally:
        gate.touch()
    assert cluster.wait(pinned).state == "COMPLETED"


@pytest.mark.skipif(
    not (BLKIO / "blkio.throttle.write_bps_device").exists(),
    reason="needs the v1 blkio controller",
)
def test_max_iobps_throttles_direct_writes_on_the_folders_device(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    device, why = block_device(str(tmp_path))
    if device is None:
        pytest.skip(why)
    limit = 2 << 20  # 2 MiB/s
    size = 4 << 20
    script = (
        "g=$(sed -n 's/^[0-9]*:blkio://p' /proc/self/cgroup); "
        'cat "/sys/fs/cgroup/blkio$g/blkio.throttle.write_bps_device"; '
        'cat "/sys/fs/cgroup/blkio$g/blkio.throttle.read_bps_device"; '
        f"dd if=/dev/zero of=big bs=1M count={size >> 20} oflag=direct 2>/dev/null && echo wrote"
    )
    start = time.monotonic()
    job = client.submit(["sh", "-c", script], max_iobps="2Mi")
    info = cluster.wait(job, timeout=120)
    took = time.monotonic() - start
    assert (info.state, info.exit_code) == ("COMPLETED", 0), _sys(client, job)
    assert _out(client, job) == [f"{device} {limit}", f"{device} {limit}", "wrote"]
    # A lower bound only: at 2 MiB/s, 4 MiB take 2 s; a loaded machine is only slower.
    assert took >= size / limit * 0.5
    assert any("max I/O 2Mi/s" in t for t in _sys(client, job))


def test_max_iobps_on_a_folder_with_no_block_device_says_it_is_not_enforced(
    tmp_path: Path,
) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or block_device(str(shm))[0] is not None:
        pytest.skip("no tmpfs at /dev/shm")
    work = Path(os.path.realpath(shm)) / f"rbs-test-{os.getpid()}"
    cluster = JobCluster(tmp_path / "server")
    try:
        cluster.add_worker(work)
        client = cluster.client()
        job = client.submit(["true"], max_iobps="10M")
        assert cluster.wait(job).state == "COMPLETED"
        notes = _sys(client, job)
        assert any("I/O limit not enforced" in t and "no block device" in t for t in notes)
    finally:
        cluster.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
