"""A container job on a worker with --run-uids: the payload runs as the run's uid inside
the container (no setuid way back up), and can write its folder. Real podman, as root."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from jobs_harness import JobCluster
from podman_image import CONF, MISSING, build_image

from rbs.executor.runuser import RunUsers, UidRange

pytestmark = [
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="switching users needs root and setpriv",
    ),
]
UIDS = UidRange(first=210000, last=210063)


def test_a_container_job_runs_as_the_runs_uid(tmp_path: Path) -> None:
    conf = tmp_path / "containers.conf"
    conf.write_text(CONF)
    ref, marker = build_image(tmp_path, conf)
    (tmp_path / "locks").mkdir()
    users = RunUsers(uids=UIDS, lock_dir=str(tmp_path / "locks"))
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1", run_users=users)
        client = c.client()
        probe = (
            'echo "uid=$(id -u) gid=$(id -g)"; grep NoNewPrivs /proc/self/status; '
            "echo made > out.txt && cat out.txt; cat /etc/rbs-marker"
        )
        job = client.submit(["sh", "-c", probe], container=ref)
        info = c.wait(job, timeout=240)
        lines = list(client.logs(job))
        sys_lines = [x.text for x in lines if x.stream == "sys"]
        assert info.state == "COMPLETED", sys_lines
        out = [x.text for x in lines if x.stream == "out"]
        (ids,) = [t for t in out if t.startswith("uid=")]
        uid = int(ids.split()[0].removeprefix("uid="))
        assert UIDS.first <= uid <= UIDS.last and ids == f"uid={uid} gid={uid}"
        assert "NoNewPrivs:\t1" in out
        assert "made" in out and marker in out
        assert any("as the run's uid" in t for t in sys_lines), sys_lines
        assert any(t.startswith(f"user: uid {uid} ") for t in sys_lines), sys_lines
    finally:
        c.stop()
