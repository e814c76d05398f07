"""The Workers stream's messages <-> typed values: the same bytes as the messages built by
hand field by field, both directions, and what a side does with a message it cannot read."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from google.protobuf import duration_pb2
from google.rpc import code_pb2, status_pb2

from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2 as re_pb2
from rbs._proto.rbs.v1 import workers_pb2 as w_pb2
from rbs.model import Digest, DigestFunction, JobManifest, LogLine, LogStream
from rbs.wire.actions import (
    ActionResultInfo,
    ExecutionTimes,
    OutputDirectoryInfo,
    OutputFileInfo,
    OutputSymlinkInfo,
)
from rbs.wire.errors import InvalidRequest
from rbs.wire.workers import WORKERS_PROTOCOL, manifest_to_proto
from rbs.wire.workers_actions import (
    ActionFinishedReport,
    ActionLeaseInfo,
    ActionStartedReport,
    CancelOrder,
    ReceivedActionResult,
)
from rbs.wire.workers_jobs import (
    JobFinishedReport,
    JobLeaseInfo,
    JobStartedReport,
    KillOrder,
    LogAck,
    LogBatch,
)
from rbs.wire.workers_session import (
    HeartbeatReport,
    RegisteredInfo,
    Registration,
    UnknownOrder,
    order_from_pb,
    order_to_pb,
    report_from_pb,
    report_to_pb,
)
from rbs.wire.workers_status import (
    ClusterStatusInfo,
    WorkerStatusInfo,
    status_dict,
    status_from_pb,
    status_to_pb,
)

B3 = DigestFunction.BLAKE3
ROOT = Digest(function=B3, hash="a" * 64, size=120)
CKPT = Digest(function=B3, hash="b" * 64, size=80)
OUT = Digest(function=B3, hash="c" * 64, size=40)
MANIFEST = JobManifest(name="train", command=("python", "t.py"), input_root=ROOT)


def _bytes(msg: object) -> bytes:
    data: bytes = msg.SerializeToString(deterministic=True)  # type: ignore[attr-defined]
    return data


def _rank(lease_id: str) -> int:
    return int(lease_id.rsplit(".", 1)[1])


def _pb_digest(d: Digest) -> re_pb2.Digest:
    return re_pb2.Digest(hash=d.hash, size_bytes=d.size)


# ---------------------------------------------------------------- worker -> server


def test_register_is_the_message_built_by_hand() -> None:
    reg = Registration(
        worker_id="w1",
        name="n",
        hostname="h",
        address="10.0.0.1",
        cpus=8,
        memory_bytes=1 << 34,
        gpu_ids=("0", "1"),
        build_slots=4,
        job_slots=2,
        container_runtimes=("podman",),
        version="0.1.0",
        held_action_leases=("x-lease-1",),
        held_job_leases=("3.1.0",),
    )
    by_hand = w_pb2.WorkerMessage(
        register=w_pb2.Register(
            worker_id="w1",
            name="n",
            hostname="h",
            address="10.0.0.1",
            cpus=8,
            memory_bytes=1 << 34,
            gpu_ids=["0", "1"],
            build_slots=4,
            job_slots=2,
            container_runtimes=["podman"],
            version="0.1.0",
            held_action_leases=["x-lease-1"],
            held_job_leases=["3.1.0"],
            protocol_version=WORKERS_PROTOCOL,
        )
    )
    assert _bytes(report_to_pb(reg)) == _bytes(by_hand)
    assert report_from_pb(by_hand, rank_of=_rank) == reg


def test_heartbeat_and_action_started_round_trip() -> None:
    for report in (
        HeartbeatReport(build_slots_used=1, job_slots_used=2, load1=0.5),
        ActionStartedReport(lease_id="p-lease-3"),
    ):
        assert report_from_pb(report_to_pb(report), rank_of=_rank) == report
    assert _bytes(report_to_pb(ActionStartedReport(lease_id="l"))) == _bytes(
        w_pb2.WorkerMessage(action_started=w_pb2.ActionStarted(lease_id="l"))
    )


def test_action_finished_carries_the_result_as_reapi_states_it() -> None:
    times = ExecutionTimes(
        worker="w1",
        worker_start_ns=1_000_000_001,
        input_fetch_start_ns=1_000_000_002,
        input_fetch_completed_ns=1_000_000_003,
        execution_start_ns=1_000_000_004,
        execution_completed_ns=1_000_000_005,
        output_upload_start_ns=1_000_000_006,
        output_upload_completed_ns=1_000_000_007,
        worker_completed_ns=2_000_000_008,
    )
    result = ActionResultInfo(
        exit_code=3,
        stdout_digest=OUT,
        stderr_digest=CKPT,
        output_files=(OutputFileInfo(path="out/a", digest=ROOT, is_executable=True),),
        output_symlinks=(OutputSymlinkInfo(path="out/l", target="a"),),
        output_directories=(
            OutputDirectoryInfo(path="out/d", tree_digest=OUT, root_directory_digest=ROOT),
        ),
        execution_metadata=times,
    )
    report = ActionFinishedReport(
        lease_id="p-lease-1", code=grpc.StatusCode.DEADLINE_EXCEEDED, message="slow", result=result
    )
    # As the worker built it before there were typed values.
    by_hand = re_pb2.ActionResult(exit_code=3)
    by_hand.stdout_digest.CopyFrom(_pb_digest(OUT))
    by_hand.stderr_digest.CopyFrom(_pb_digest(CKPT))
    by_hand.output_files.add(path="out/a", digest=_pb_digest(ROOT), is_executable=True)
    by_hand.output_symlinks.add(path="out/l", target="a")
    by_hand.output_directories.add(
        path="out/d", tree_digest=_pb_digest(OUT), root_directory_digest=_pb_digest(ROOT)
    )
    meta = re_pb2.ExecutedActionMetadata(worker="w1")
    for i, name in enumerate(
        (
            "worker_start",
            "input_fetch_start",
            "input_fetch_completed",
            "execution_start",
            "execution_completed",
            "output_upload_start",
            "output_upload_completed",
        ),
        start=1,
    ):
        getattr(meta, f"{name}_timestamp").FromNanoseconds(1_000_000_000 + i)
    meta.worker_completed_timestamp.FromNanoseconds(2_000_000_008)
    by_hand.execution_metadata.CopyFrom(meta)
    message = w_pb2.WorkerMessage(
        action_finished=w_pb2.ActionFinished(
            lease_id="p-lease-1",
            status=status_pb2.Status(code=code_pb2.DEADLINE_EXCEEDED, message="slow"),
            result=by_hand,
        )
    )
    assert _bytes(report_to_pb(report)) == _bytes(message)
    got = report_from_pb(message, rank_of=_rank)
    assert isinstance(got, ReceivedActionResult)
    assert got.lease_id == "p-lease-1" and got.status.code == code_pb2.DEADLINE_EXCEEDED
    assert _bytes(got.result) == _bytes(by_hand)  # the server keeps the REAPI message


def test_an_action_without_result_sends_an_empty_one() -> None:
    report = ActionFinishedReport(lease_id="l", code=grpc.StatusCode.INVALID_ARGUMENT, message="m")
    by_hand = w_pb2.WorkerMessage(
        action_finished=w_pb2.ActionFinished(
            lease_id="l",
            status=status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message="m"),
            result=re_pb2.ActionResult(),
        )
    )
    assert _bytes(report_to_pb(report)) == _bytes(by_hand)


def test_job_reports_are_the_messages_built_by_hand() -> None:
    started = JobStartedReport(
        lease_id="4_2.1.0", job_id="4", task_index=2, attempt=1, pid=77, started_at=1700000000.5
    )
    by_hand_started = w_pb2.JobStarted(
        lease_id="4_2.1.0", job_id="4", task_index=2, attempt=1, pid=77
    )
    by_hand_started.started_at.FromNanoseconds(int(1700000000.5 * 1e9))
    assert _bytes(report_to_pb(started)) == _bytes(w_pb2.WorkerMessage(job_started=by_hand_started))
    assert report_from_pb(report_to_pb(started), rank_of=_rank) == started

    finished = JobFinishedReport(
        lease_id="4_2.1.1",
        job_id="4",
        task_index=2,
        attempt=1,
        state="FAILED",
        exit_code=137,
        signal=9,
        peak_memory_bytes=1 << 20,
        oom_killed=True,
        message="out of memory",
        finished_at_ns=1_700_000_000_123_456_789,
        digest_function=B3,
        output_tree=OUT,
        checkpoint_tree=CKPT,
    )
    fin = w_pb2.JobFinished(
        lease_id="4_2.1.1",
        job_id="4",
        task_index=2,
        attempt=1,
        state="FAILED",
        exit_code=137,
        signal=9,
        peak_memory_bytes=1 << 20,
        oom_killed=True,
        message="out of memory",
    )
    fin.finished_at.FromNanoseconds(1_700_000_000_123_456_789)
    fin.digest_function = re_pb2.DigestFunction.BLAKE3
    fin.output_tree_digest.CopyFrom(_pb_digest(OUT))
    fin.checkpoint_tree_digest.CopyFrom(_pb_digest(CKPT))
    assert _bytes(report_to_pb(finished)) == _bytes(w_pb2.WorkerMessage(job_finished=fin))
    assert report_from_pb(report_to_pb(finished), rank_of=_rank) == finished


def test_a_failed_start_reports_no_trees_and_no_function() -> None:
    report = JobFinishedReport(
        lease_id="5.1.0",
        job_id="5",
        task_index=-1,
        attempt=1,
        state="FAILED",
        exit_code=125,
        finished_at_ns=5,
        message="x",
    )
    pb = report_to_pb(report).job_finished
    assert pb.digest_function == 0
    assert not pb.HasField("output_tree_digest") and not pb.HasField("checkpoint_tree_digest")
    assert report_from_pb(report_to_pb(report), rank_of=_rank) == report


def test_a_job_report_with_a_malformed_digest_is_an_invalid_request() -> None:
    fin = w_pb2.JobFinished(lease_id="5.1.0", digest_function=re_pb2.DigestFunction.BLAKE3)
    fin.output_tree_digest.CopyFrom(re_pb2.Digest(hash="xyz", size_bytes=1))
    with pytest.raises(InvalidRequest, match="output_tree_digest"):
        report_from_pb(w_pb2.WorkerMessage(job_finished=fin), rank_of=_rank)


def test_log_lines_carry_the_run_of_their_batch() -> None:
    lines = (
        LogLine(seq=1, time=1700000000.5, stream=LogStream.OUT, text="a", task=2, attempt=3),
        LogLine(seq=2, time=1700000001.0, stream=LogStream.SYS, text="b", task=2, attempt=3),
    )
    batch = LogBatch(lease_id="9_2.3.1", job_id="9", task_index=2, attempt=3, lines=lines)
    pb = report_to_pb(batch)
    assert [(x.seq, x.stream, x.text) for x in pb.log_lines.lines] == [
        (1, w_pb2.LogLine.OUT, "a"),
        (2, w_pb2.LogLine.SYS, "b"),
    ]
    got = report_from_pb(pb, rank_of=_rank)
    assert isinstance(got, LogBatch)
    # The server reads the rank off the lease id: the lines of rank 1 of a gang.
    assert got == dataclasses.replace(
        batch, lines=tuple(dataclasses.replace(x, rank=1) for x in lines)
    )
    old = w_pb2.WorkerMessage(log_lines=w_pb2.LogLines(job_id="9", task_index=-1, attempt=1))
    old.log_lines.lines.add(seq=1, stream=w_pb2.LogLine.ERR, text="e")
    got = report_from_pb(old, rank_of=_rank)  # no lease id: rank 0, not an array
    assert isinstance(got, LogBatch)
    assert [(x.task, x.rank, x.stream) for x in got.lines] == [(None, 0, LogStream.ERR)]


def test_a_report_of_an_unknown_kind_reads_as_none() -> None:
    assert report_from_pb(w_pb2.WorkerMessage(), rank_of=_rank) is None


# ---------------------------------------------------------------- server -> worker


def test_registered_and_cancel_are_the_messages_built_by_hand() -> None:
    registered = RegisteredInfo(worker_id="w1", heartbeat_interval_s=2.5)
    assert _bytes(order_to_pb(registered)) == _bytes(
        w_pb2.ServerMessage(
            registered=w_pb2.Registered(
                worker_id="w1", heartbeat_interval=duration_pb2.Duration(seconds=2, nanos=500000000)
            )
        )
    )
    assert order_from_pb(order_to_pb(registered)) == registered
    cancel = CancelOrder(lease_id="l", reason="done elsewhere")
    assert order_from_pb(order_to_pb(cancel)) == cancel


def test_action_lease_is_the_message_built_by_hand() -> None:
    lease = ActionLeaseInfo(
        lease_id="p-lease-7", operation_name="operations/u", action_digest=ROOT, timeout_s=90.5
    )
    by_hand = w_pb2.ServerMessage(
        action_lease=w_pb2.ActionLease(
            lease_id="p-lease-7",
            operation_name="operations/u",
            action_digest=_pb_digest(ROOT),
            digest_function=re_pb2.DigestFunction.BLAKE3,
            timeout=duration_pb2.Duration(seconds=90, nanos=500000000),
            attempt=1,
        )
    )
    assert _bytes(order_to_pb(lease)) == _bytes(by_hand)
    assert order_from_pb(by_hand) == lease


def test_an_action_lease_the_worker_cannot_read_says_why() -> None:
    pb = w_pb2.ServerMessage(
        action_lease=w_pb2.ActionLease(lease_id="l", action_digest=_pb_digest(ROOT))
    )
    got = order_from_pb(pb)
    assert isinstance(got, ActionLeaseInfo) and got.action_digest is None
    assert got.problem == "digest function 0 is not supported by this worker"
    pb.action_lease.digest_function = 99
    got = order_from_pb(pb)
    assert isinstance(got, ActionLeaseInfo)
    assert got.problem == "digest function 99 is not supported by this worker"
    pb.action_lease.digest_function = re_pb2.DigestFunction.SHA256
    pb.action_lease.action_digest.hash = "nothex"
    got = order_from_pb(pb)
    assert isinstance(got, ActionLeaseInfo) and got.action_digest is None
    assert got.problem.startswith("action_digest: ")


def _lease(**fields: object) -> JobLeaseInfo:
    base: dict[str, object] = {
        "lease_id": "4_2.3.1",
        "job_id": "4",
        "manifest": MANIFEST,
        "task_index": 2,
        "attempt": 3,
        "gpu_ids": ("1",),
        "env": (("RBS_JOB_ID", "4"), ("RBS_ATTEMPT", "3")),
        "node_rank": 1,
        "nodelist": ("a", "b"),
        "master_addr": "a",
        "master_port": 29500,
        "input_root": ROOT,
    }
    base.update(fields)
    return JobLeaseInfo(**base)  # type: ignore[arg-type]


def test_job_lease_is_the_message_built_by_hand() -> None:
    for checkpoint in (None, CKPT):
        lease = _lease(checkpoint=checkpoint)
        by_hand = w_pb2.JobLease(
            lease_id="4_2.3.1",
            job_id="4",
            manifest=manifest_to_proto(MANIFEST),
            task_index=2,
            attempt=3,
            gpu_ids=["1"],
            env={"RBS_JOB_ID": "4", "RBS_ATTEMPT": "3"},
            node_rank=1,
            nodelist=["a", "b"],
            master_addr="a",
            master_port=29500,
        )
        by_hand.input_root_digest.CopyFrom(_pb_digest(ROOT))
        by_hand.digest_function = re_pb2.DigestFunction.BLAKE3
        if checkpoint is not None:
            by_hand.checkpoint_digest.CopyFrom(_pb_digest(checkpoint))
        message = w_pb2.ServerMessage(job_lease=by_hand)
        assert _bytes(order_to_pb(lease)) == _bytes(message)
        got = order_from_pb(message)
        assert isinstance(got, JobLeaseInfo)
        assert dataclasses.replace(got, env=tuple(sorted(got.env))) == dataclasses.replace(
            lease, env=tuple(sorted(lease.env))
        )
        assert got.function is B3


def test_a_lease_without_digests_runs_with_the_default_function() -> None:
    lease = _lease(input_root=None, manifest=JobManifest(name="j", command=("true",)))
    pb = order_to_pb(lease).job_lease
    assert pb.digest_function == 0 and not pb.HasField("input_root_digest")
    got = order_from_pb(order_to_pb(lease))
    assert isinstance(got, JobLeaseInfo)
    assert got.input_root is None and got.checkpoint is None and got.function is B3


def test_the_leases_of_one_manifest_each_carry_all_of_it() -> None:
    """An array's leases share one manifest object, whose message the server builds once:
    each lease still carries the whole manifest, and changing one lease's message changes
    no other's."""
    shared = JobManifest(name="arr", command=("true",), env=(("A", "1"),))
    first = order_to_pb(_lease(manifest=shared, lease_id="4_1.1.0"))
    first.job_lease.manifest.name = "changed"
    second = order_to_pb(_lease(manifest=shared, lease_id="4_2.1.0"))
    assert _bytes(second.job_lease.manifest) == _bytes(manifest_to_proto(shared))
    other = dataclasses.replace(shared, name="other")  # an equal-shaped other object
    assert order_to_pb(_lease(manifest=other)).job_lease.manifest.name == "other"
    got = order_from_pb(second)
    assert isinstance(got, JobLeaseInfo) and got.manifest == shared


def test_a_lease_the_worker_cannot_read_is_named_not_raised() -> None:
    pb = order_to_pb(_lease())
    pb.job_lease.ClearField("manifest")
    got = order_from_pb(pb)
    assert isinstance(got, JobLeaseInfo) and got.manifest is None
    assert got.unreadable is not None and "carries no manifest" in got.unreadable
    pb = order_to_pb(_lease())
    pb.job_lease.digest_function = 99
    got = order_from_pb(pb)
    assert isinstance(got, JobLeaseInfo) and got.unreadable is not None
    pb = order_to_pb(_lease())
    pb.job_lease.input_root_digest.hash = "nothex"
    got = order_from_pb(pb)
    assert isinstance(got, JobLeaseInfo) and got.unreadable is None
    assert got.manifest == MANIFEST and got.bad_digest is not None


def test_kill_and_ack_are_the_messages_built_by_hand() -> None:
    kill = KillOrder(lease_id="4.1.0", job_id="4", reason="timeout")
    assert _bytes(order_to_pb(kill)) == _bytes(
        w_pb2.ServerMessage(kill_job=w_pb2.KillJob(lease_id="4.1.0", job_id="4", reason="timeout"))
    )
    assert order_from_pb(order_to_pb(kill)) == kill
    ack = LogAck(lease_id="4.1.0", job_id="4", task_index=-1, attempt=1, log_seq=12)
    assert _bytes(order_to_pb(ack)) == _bytes(
        w_pb2.ServerMessage(
            ack=w_pb2.Ack(job_id="4", task_index=-1, attempt=1, log_seq=12, lease_id="4.1.0")
        )
    )
    assert order_from_pb(order_to_pb(ack)) == ack


def test_an_order_of_an_unknown_kind_is_an_unknown_order() -> None:
    assert order_from_pb(w_pb2.ServerMessage()) == UnknownOrder(kind=None)


# ---------------------------------------------------------------- status


def test_status_round_trips_and_prints_plain_json() -> None:
    status = ClusterStatusInfo(
        workers=(
            WorkerStatusInfo(
                worker_id="w1",
                name="n",
                cpus=4,
                gpu_ids=("0",),
                build_slots=4,
                build_slots_used=1,
                state="CONNECTED",
                last_heartbeat_ns=1_700_000_000_500_000_000,
                container_runtimes=("podman",),
            ),
        ),
        queued_actions=2,
        running_actions=1,
        jobs_by_state=(("PENDING", 3), ("RUNNING", 0)),
        now_ns=1_700_000_001_000_000_000,
    )
    pb = status_to_pb(status)
    back = status_from_pb(pb)  # a map: the order of the states is the reader's to choose
    assert dataclasses.replace(back, jobs_by_state=()) == dataclasses.replace(
        status, jobs_by_state=()
    )
    assert dict(back.jobs_by_state) == dict(status.jobs_by_state)
    doc = status_dict(status)
    assert doc["now"] == pb.now.ToJsonString() == "2023-11-14T22:13:21Z"
    assert doc["jobs_by_state"] == {"PENDING": 3, "RUNNING": 0}
    assert doc["workers"][0]["last_heartbeat"] == "2023-11-14T22:13:20.500Z"
    assert doc["workers"][0]["gpu_ids"] == ["0"]
