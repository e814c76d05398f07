"""GET /metrics on a running cluster: the series a dashboard reads, fed by real jobs and RPCs."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import grpc
from jobs_harness import JobCluster, wait_for
from prometheus_client.parser import text_string_to_metric_families

from rbs.client.jobs import JobsClient
from rbs.model import Digest, DigestFunction
from rbs.wire.reapi_client import ActionCacheClient, RemoteStore


def scrape(
    cluster: JobCluster, token: str | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, keyed by name and sorted labels."""
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.port + 1}/metrics")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_metrics_count_jobs_runs_slots_and_rpcs(cluster: JobCluster, client: JobsClient) -> None:
    ok = client.submit(["true"])
    bad = client.submit(["sh", "-c", "exit 3"])
    assert cluster.wait(ok).state == "COMPLETED"
    assert cluster.wait(bad).state == "FAILED"
    m = scrape(cluster)
    assert m[("rbs_jobs", (("state", "COMPLETED"),))] == 1
    assert m[("rbs_jobs", (("state", "FAILED"),))] == 1
    assert m[("rbs_jobs", (("state", "PENDING"),))] == 0
    assert m[("rbs_queue_jobs", (("queue", "batch"), ("state", "RUNNING")))] == 0
    assert m[("rbs_job_wait_seconds_count", ())] == 2
    assert m[("rbs_job_run_seconds_count", ())] == 2
    assert m[("rbs_job_oom_kills_total", ())] == 0
    assert m[("rbs_scheduler_step_seconds_count", ())] >= 2
    # The harness's one worker: four job slots, none in use once both jobs ended.
    assert m[("rbs_workers", (("state", "CONNECTED"),))] == 1
    assert m[("rbs_job_slots", (("state", "free"),))] == 4
    assert m[("rbs_job_slots", (("state", "used"),))] == 0
    assert m[("rbs_gpus", (("state", "used"),))] == 0
    assert m[("rbs_http_bytes_total", (("direction", "out"),))] > 0
    assert ("rbs_cas_bytes", ()) in m
    # No series is labelled by a job: every label value is from a small, fixed set.
    for name, labels in m:
        for key, value in labels:
            assert key in {"state", "queue", "method", "code", "direction", "result", "le"}, (
                name,
                key,
            )
            assert value not in {ok, bad}, (name, labels)


def test_metrics_of_a_running_job_show_its_slot_in_use(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    job = client.submit(["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])
    wait_for("the job to run", lambda: client.show(job).state == "RUNNING", timeout=60)
    m = scrape(cluster)
    assert m[("rbs_jobs", (("state", "RUNNING"),))] == 1
    assert m[("rbs_queue_jobs", (("queue", "batch"), ("state", "RUNNING")))] == 1
    assert m[("rbs_job_slots", (("state", "used"),))] == 1
    assert m[("rbs_job_run_seconds_count", ())] == 0
    gate.touch()
    assert cluster.wait(job).state == "COMPLETED"
    assert scrape(cluster)[("rbs_job_run_seconds_count", ())] == 1


def test_rpcs_by_method_and_code_and_cas_lookups(cluster: JobCluster) -> None:
    with grpc.insecure_channel(cluster.address) as channel:
        ac = ActionCacheClient(channel)
        assert ac.get(Digest.of(b"never ran", DigestFunction.SHA256)) is None
        assert ac.get(Digest.of(b"nor this", DigestFunction.SHA256)) is None
    with grpc.insecure_channel(cluster.address) as channel:
        held = RemoteStore(channel).put(b"a blob the CAS holds")
        absent = Digest.of(b"a blob it never saw", DigestFunction.SHA256)
        assert RemoteStore(channel).find_missing([held, absent]) == [absent]
    m = scrape(cluster)
    assert m[("rbs_cas_lookups_total", (("result", "hit"),))] >= 1
    assert m[("rbs_cas_lookups_total", (("result", "miss"),))] >= 1
    assert m[("rbs_cas_evicted_blobs_total", ())] == 0
    method = "/build.bazel.remote.execution.v2.ActionCache/GetActionResult"
    assert m[("rbs_rpc_total", (("code", "NOT_FOUND"), ("method", method)))] == 2
    assert ("rbs_rpc_total", (("code", "OK"), ("method", method))) not in m
    assert m[("rbs_rpc_seconds_count", (("method", method),))] == 2


def test_only_metrics_itself_is_served(cluster: JobCluster) -> None:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{cluster.port + 1}/metrics/x", timeout=30)
    except urllib.error.HTTPError as e:
        assert e.code == 404
    else:
        raise AssertionError("/metrics/x answered")
