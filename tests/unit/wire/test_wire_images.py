"""A worker's Images report on the wire, how a job's image is matched against it, and
the refusal at submit of an image no worker has while none can pull."""

from __future__ import annotations

from rbs.wire.workers_images import ImagesReport, LocalImageInfo, has_image, image_refusal
from rbs.wire.workers_session import report_from_pb, report_to_pb
from rbs.wire.workers_status import (
    ClusterStatusInfo,
    WorkerStatusInfo,
    status_dict,
    status_from_pb,
    status_to_pb,
)

HEX = "ab" * 32
BUSY = LocalImageInfo(
    image_id=f"sha256:{HEX}",
    names=("localhost/tools:1", f"localhost/tools@sha256:{'cd' * 32}"),
    size_bytes=1 << 20,
)
UBUNTU = LocalImageInfo(image_id=f"sha256:{'ef' * 32}", names=("docker.io/library/ubuntu:22.04",))


def test_an_images_report_survives_the_stream_and_the_status() -> None:
    report = ImagesReport(images=(BUSY, UBUNTU), can_pull=True)
    assert report_from_pb(report_to_pb(report), rank_of=lambda _: 0) == report
    w = WorkerStatusInfo(worker_id="w1", images=(BUSY,), can_pull_images=True)
    s = ClusterStatusInfo(workers=(w,))
    assert status_from_pb(status_to_pb(s)) == s
    (doc,) = status_dict(s)["workers"]
    assert doc["images"] == [
        {"image_id": BUSY.image_id, "names": list(BUSY.names), "size_bytes": 1 << 20}
    ]
    assert doc["can_pull_images"] is True


def test_an_image_is_found_by_each_name_an_engine_knows_it_by() -> None:
    imgs = (BUSY, UBUNTU)
    for ref in (
        "localhost/tools:1",
        "tools:1",  # podman completes short names with localhost/
        "ubuntu:22.04",  # ... and Docker with docker.io/library/
        "library/ubuntu:22.04",
        f"localhost/tools@sha256:{'cd' * 32}",
        f"sha256:{HEX}",
        HEX[:12],
    ):
        assert has_image(imgs, ref), ref
    for ref in ("tools:2", "ubuntu", "localhost/other:1", HEX[:6], "ab" * 6 + "00"):
        assert not has_image(imgs, ref), ref


def test_refused_only_when_no_worker_has_it_and_none_can_pull() -> None:
    have = ImagesReport(images=(BUSY,))
    why = image_refusal("app:3", [have, ImagesReport(images=(UBUNTU,))])
    assert why is not None
    assert why.startswith("--container app:3: unknown image")
    assert "localhost/tools:1" in why and "docker.io/library/ubuntu:22.04" in why
    assert "@sha256" not in why  # names, not digests
    assert image_refusal("tools:1", [ImagesReport(), have]) is None  # one worker has it
    assert image_refusal("app:3", [have, ImagesReport(can_pull=True)]) is None
    assert image_refusal("app:3", [have, None]) is None  # one has not reported yet
    assert image_refusal("app:3", []) is None  # no runtime at all: refused elsewhere
    assert "images on workers: none" in (image_refusal("app:3", [ImagesReport()]) or "")
