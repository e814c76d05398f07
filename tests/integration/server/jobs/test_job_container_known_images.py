"""Workers report their container images; a job naming an image no worker has, while
none can pull (nothing is reachable here), is refused at submit. Real podman, a real
server and worker; `rbs remote status` shows the images."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from jobs_harness import JobCluster, wait_for
from podman_image import CONF, MISSING, build_image, podman

from rbs.client.errors import JobError

pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


def _reported(client: Any, present: str, absent: str | None = None) -> dict[str, Any] | None:
    """The worker's status once its images list `present` (and not `absent`)."""
    (w,) = client.status()["workers"]
    names = {n for i in w.get("images", []) for n in i["names"]}
    return w if present in names and absent not in names else None


def _rbs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rbs", *args], capture_output=True, text=True, timeout=120
    )


def test_an_image_no_worker_has_is_refused_at_submit_listing_theirs(tmp_path: Path) -> None:
    conf = tmp_path / "containers.conf"
    conf.write_text(CONF)
    ref, marker = build_image(tmp_path, conf)
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1", container_pull="no")  # as auto where nothing answers
        client = c.client()
        w = wait_for("the worker's images", lambda: _reported(client, ref), timeout=180)
        assert not w.get("can_pull_images", False)
        # Listed without the API service, which waits for the first container job.
        assert not (tmp_path / "w1" / "containers" / "podman.sock").exists()
        (img,) = [i for i in w["images"] if ref in i["names"]]
        own_id = podman(conf, "image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()
        assert img["image_id"] == f"sha256:{own_id.removeprefix('sha256:')}"
        assert int(img["size_bytes"]) > 0

        missing = f"localhost/rbs-no-such-image:{uuid.uuid4().hex[:8]}"
        with pytest.raises(JobError) as err:
            client.submit(["true"], container=missing)
        text = str(err.value)
        assert f"--container {missing}: unknown image" in text
        assert ref in text  # the images workers have are listed
        assert client.status()["jobs_by_state"].get("PENDING", 0) in (0, "0")

        # An image a worker has runs, by its name or its id.
        one = client.submit(["cat", "/etc/rbs-marker"], container=ref)
        assert c.wait(one, timeout=180).state == "COMPLETED"
        assert marker in [ln.text for ln in client.logs(one)]
        short_id = own_id.removeprefix("sha256:")[:12]
        by_id = client.submit(["cat", "/etc/rbs-marker"], container=short_id)
        assert c.wait(by_id, timeout=180).state == "COMPLETED"

        table = _rbs("remote", "status", "--server", c.address)
        assert table.returncode == 0, table.stderr
        assert "container images" in table.stdout
        row = next(ln for ln in table.stdout.splitlines() if ref in ln)
        assert own_id.removeprefix("sha256:")[:12] in row and " no " in f" {row} "
        doc = _rbs("remote", "status", "--server", c.address, "--json")
        assert doc.returncode == 0, doc.stderr
        (jw,) = json.loads(doc.stdout)["workers"]
        assert jw["can_pull_images"] is False
        mine = [i for i in jw["images"] if ref in i["names"]]
        assert [i["image_id"] for i in mine] == [img["image_id"]]
        assert mine[0]["size_bytes"] == int(img["size_bytes"])
    finally:
        c.stop()
        podman(conf, "rmi", "-f", ref, check=False)


def test_a_worker_that_says_it_can_pull_lets_an_unknown_image_through(tmp_path: Path) -> None:
    c = JobCluster(tmp_path / "server")
    try:
        c.add_worker(tmp_path / "w1", container_pull="yes")  # e.g. a private registry
        client = c.client()

        def can_pull() -> bool:
            (w,) = client.status()["workers"]
            return bool(w.get("can_pull_images"))

        wait_for("the worker's images", can_pull, timeout=180)
        missing = f"localhost/rbs-no-such-image:{uuid.uuid4().hex[:8]}"
        job = client.submit(["cat", "/etc/rbs-marker"], container=missing)  # not refused
        assert c.wait(job, timeout=180).state == "FAILED"
        lines = [ln.text for ln in client.logs(job)]
        assert any(
            f"image {missing!r} is not on this worker and pulling it failed" in ln for ln in lines
        )
        assert can_pull()  # "yes" stays yes after a failed pull
    finally:
        c.stop()
