"""A worker's container images under `--container-cache-size`: past the cap, the least
recently used image its jobs ran is removed, never the one a job uses. Real podman."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jobs_harness import JobCluster, wait_for
from podman_image import CONF, MISSING, build_image, podman

from rbs.client.errors import JobError

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def _lists(client: Any, present: str, absent: str) -> bool:
    (w,) = client.status()["workers"]
    names = {n for i in w.get("images", []) for n in i["names"]}
    return present in names and absent not in names


def test_past_the_cap_the_least_recently_used_image_goes(tmp_path: Path) -> None:
    conf = tmp_path / "containers.conf"
    conf.write_text(CONF)
    first, _ = build_image(tmp_path, conf)
    second, marker = build_image(tmp_path, conf)
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1", container_cache=1)  # any image is over one byte
        client = c.client()
        one = client.submit(["cat", "/etc/rbs-marker"], container=first)
        assert c.wait(one, timeout=180).state == "COMPLETED"
        assert podman(conf, "image", "exists", first, check=False).returncode == 0
        two = client.submit(["cat", "/etc/rbs-marker"], container=second)
        assert c.wait(two, timeout=180).state == "COMPLETED"
        assert marker in [ln.text for ln in client.logs(two)]
        # The second job's prepare removed the first image; its own stays.
        assert podman(conf, "image", "exists", first, check=False).returncode == 1
        assert podman(conf, "image", "exists", second, check=False).returncode == 0
        # The worker reports its images again after the removal: the first is gone, and a
        # job naming it is now refused at submit (no worker has it, none can pull).
        wait_for("the report after the removal", lambda: _lists(client, second, first), 180)
        with pytest.raises(JobError, match=f"--container {first}: unknown image"):
            client.submit(["true"], container=first)
    finally:
        c.stop()
        for ref in (first, second):
            podman(conf, "rmi", "-f", ref, check=False)
