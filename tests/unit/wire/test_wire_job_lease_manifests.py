"""A worker decodes the manifest an array's tasks share once; a bad one is named each time."""

from __future__ import annotations

from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.model import JobManifest
from rbs.wire.workers import manifest_to_proto
from rbs.wire.workers_jobs import job_lease_from_pb


def _lease(task: int, manifest: JobManifest) -> w_pb2.JobLease:
    return w_pb2.JobLease(
        lease_id=f"7_{task}.1.0",
        job_id="7",
        manifest=manifest_to_proto(manifest),
        task_index=task,
        attempt=1,
    )


def test_the_tasks_of_an_array_share_one_decoded_manifest() -> None:
    manifest = JobManifest(name="sweep", command=("python", "step.py", "--fast"))
    a, b = (job_lease_from_pb(_lease(i, manifest)) for i in (0, 1))
    assert a.manifest == manifest and b.manifest is a.manifest
    assert (a.lease_id, b.lease_id, b.task_index) == ("7_0.1.0", "7_1.1.0", 1)
    other = job_lease_from_pb(_lease(2, JobManifest(name="sweep", command=("python", "x.py"))))
    assert other.manifest is not None and other.manifest.command == ("python", "x.py")


def test_an_unreadable_manifest_is_named_on_every_lease() -> None:
    pb = _lease(0, JobManifest(name="bad", command=("true",)))
    pb.manifest.api_version = "rbs/v999"
    for _ in range(2):
        lease = job_lease_from_pb(pb)
        assert lease.manifest is None
        assert lease.unreadable is not None and "api_version" in lease.unreadable
