"""Submitting job targets to a cluster: staging, overrides, provenance, retries, checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobs_harness import JobCluster
from jobtarget_ws import CAT_JOB, LOAD, write_ws

from rbs.client.jobs import JobError, JobsClient
from rbs.client.targets import build_job_target, check_queue, stage_manifest_inputs
from rbs.model import JobManifest
from rbs.wire.manifest import manifest_from_json, manifest_to_dict


def out_lines(client: JobsClient, job: str) -> list[str]:
    return [x.text for x in client.logs(job) if x.stream == "out"]


def submit_target(
    client: JobsClient, root: Path, target: str = "//app:job", **flags: object
) -> tuple[str, JobManifest]:
    manifest, prov = build_job_target(target, cwd=root)
    check_queue(client, manifest, prov)
    stage_manifest_inputs(client, manifest, cwd=root)
    return client.submit(None, manifest=manifest, provenance=prov, **flags), manifest


def test_target_runs_and_only_missing_blobs_are_staged(
    cluster: JobCluster, client: JobsClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    monkeypatch.chdir(root)
    manifest, _prov = build_job_target("//app:job")
    # Four files (show, show.sh, data.txt; the binary twice, one blob) and five folders.
    assert stage_manifest_inputs(client, manifest) == 7
    assert stage_manifest_inputs(client, manifest) == 0
    job, _ = submit_target(client, root)
    info = cluster.wait(job)
    assert info.state == "COMPLETED"
    assert out_lines(client, job) == ["hello args=a1 attempt=1", "the data"]
    fetched = client.outputs(job, tmp_path / "out")
    assert (fetched / "copy.txt").read_text() == "the data\n"
    # One changed data file: its blob plus the two folders above it cross the wire.
    (root / "app/data.txt").write_text("new data\n")
    changed, _ = build_job_target("//app:job")
    assert stage_manifest_inputs(client, changed) == 3


def test_flags_override_the_target_and_show_names_each_source(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    job, _ = submit_target(client, root, time="2h", env=["EXTRA=1"], cpus="500m", priority=7)
    assert cluster.wait(job).ok
    raw = client.show(job).raw
    m, prov = raw["manifest"], raw["provenance"]
    assert m["time_limit"] == 7200 and prov["time_limit"] == "flag --time"
    assert m["resources"]["cpu"] == "500m" and prov["resources.cpu"] == "flag --cpus"
    assert m["priority"] == 7 and prov["priority"] == "flag --priority"
    assert m["env"] == {"EXTRA": "1", "GREETING": "hello"} and prov["env"] == "flag --env"
    assert m["resources"]["memory"] == "128Mi"
    for field in ("resources.memory", "command", "input_root", "queue", "outputs"):
        assert prov[field] == "target //app:job", field
    assert prov["dependencies"] == "default"


def test_manifest_file_submits_the_structure_the_scheduler_stores(
    cluster: JobCluster, client: JobsClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    built, _prov = build_job_target("//app:job", cwd=root)
    path = root / "rbs-out/app/job.job.json"
    from_file = manifest_from_json(path.read_bytes())
    assert from_file == built
    # Staged from the build store of the manifest's workspace, from any folder.
    monkeypatch.chdir(tmp_path)
    assert stage_manifest_inputs(client, from_file, source=path) > 0
    job = client.submit_manifest(from_file)
    assert cluster.wait(job).ok
    assert client.show(job).raw["manifest"] == manifest_to_dict(from_file)


def test_a_tree_nobody_has_is_refused_with_the_fix(
    client: JobsClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    built, _ = build_job_target("//app:job", cwd=root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(JobError, match="rbs build //pkg:target"):
        stage_manifest_inputs(client, built, source=elsewhere / "m.job.json")
    # From the workspace the same manifest stages fine.
    assert stage_manifest_inputs(client, built, cwd=root) > 0


def test_a_partition_the_cluster_lacks_is_an_error_with_the_fix(
    client: JobsClient, tmp_path: Path
) -> None:
    root = write_ws(
        tmp_path / "ws",
        {
            "app/BUILD": LOAD
            + 'sh_binary(name = "gpu", srcs = ["gpu.sh"])\n'
            + 'gpu_job(name = "job", binary = ":gpu")\n',
            "app/gpu.sh": "#!/bin/sh\nnvidia-smi\n",
        },
    )
    manifest, prov = build_job_target("//app:job", cwd=root)
    assert manifest.queue == "gpu"
    with pytest.raises(JobError) as e:
        check_queue(client, manifest, prov)
    text = str(e.value)
    assert "//app:job asks for partition 'gpu'" in text
    assert "queues: batch" in text
    assert '[jobs] queues = [{ name = "batch" }, { name = "gpu" }]' in text
    assert "--queue batch" in text
    # The server refuses it too, and --queue fixes it.
    stage_manifest_inputs(client, manifest, cwd=root)
    with pytest.raises(JobError, match="unknown queue"):
        client.submit_manifest(manifest, prov)
    job = client.submit(None, manifest=manifest, provenance=prov, queue="batch", gpus=0)
    assert client.show(job).raw["provenance"]["queue"] == "flag --queue"
    client.cancel([job])


def test_inputs_stage_a_built_target_with_its_runfiles(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    root = write_ws(
        tmp_path / "ws",
        {
            "app/BUILD": 'py_binary(name = "hello", srcs = ["hello.py"], data = ["msg.txt"])\n',
            "app/hello.py": (
                "import os\n"
                "here = os.path.dirname(os.path.abspath(__file__))\n"
                "print(open(os.path.join(here, 'msg.txt')).read().strip())\n"
            ),
            "app/msg.txt": "from the runfiles\n",
        },
    )
    job = client.submit(["./bin/hello"], inputs=["bin=//app:hello"], cwd=root)
    info = cluster.wait(job)
    assert info.state == "COMPLETED", out_lines(client, job)
    assert out_lines(client, job) == ["from the runfiles"]


RETRY_JOB = {
    "app/BUILD": LOAD
    + 'sh_binary(name = "step", srcs = ["step.sh"])\n'
    + 'ml_training_job(name = "job", binary = ":step", max_retries = MAX, memory = "64Mi",\n'
    + '                checkpoint_dir = "ckpt", outputs = ["result.txt"])\n',
    # Each attempt reports what the previous one checkpointed; attempt 3 succeeds.
    "app/step.sh": "#!/bin/sh\n"
    + "mkdir -p ckpt\n"
    + 'echo "attempt $RBS_ATTEMPT saw $(cat ckpt/state 2>/dev/null || echo nothing)"\n'
    + 'echo "state-of-attempt-$RBS_ATTEMPT" > ckpt/state\n'
    + '[ "$RBS_ATTEMPT" -ge 3 ] || exit 7\n'
    + "echo ok > result.txt\n",
}


def test_failed_attempts_are_retried_from_the_last_checkpoint(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    files = dict(RETRY_JOB)
    files["app/BUILD"] = files["app/BUILD"].replace("MAX", "3")
    root = write_ws(tmp_path / "ws", files)
    job, manifest = submit_target(client, root)
    assert (manifest.max_retries, manifest.checkpoint_dir) == (3, "ckpt")
    info = cluster.wait(job)
    assert (info.state, info.raw["attempts"]) == ("COMPLETED", 3)
    assert out_lines(client, job) == [
        "attempt 1 saw nothing",
        "attempt 2 saw state-of-attempt-1",
        "attempt 3 saw state-of-attempt-2",
    ]
    assert (client.outputs(job, tmp_path / "out") / "result.txt").read_text() == "ok\n"


def test_retries_are_bounded_by_max_retries(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    files = dict(RETRY_JOB)
    files["app/BUILD"] = files["app/BUILD"].replace("MAX", "1")
    root = write_ws(tmp_path / "ws", files)
    job, _ = submit_target(client, root)
    info = cluster.wait(job)
    assert (info.state, info.exit_code, info.raw["attempts"]) == ("FAILED", 7, 2)
    assert out_lines(client, job) == ["attempt 1 saw nothing", "attempt 2 saw state-of-attempt-1"]


def test_cli_submits_a_target_with_overrides(cluster: JobCluster, tmp_path: Path) -> None:
    root = write_ws(tmp_path / "ws", CAT_JOB)
    env = {**os.environ, "RBS_REMOTE": cluster.address, "RBS_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [sys.executable, "-m", "rbs", "job", "submit", "//app:job", "--wait", "--time", "5m"],
        cwd=root / "app",
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 0, run.stderr
    job = run.stdout.strip()
    assert "rbs: built //app:job -> rbs-out/app/job.job.json" in run.stderr
    raw = cluster.client().show(job).raw
    assert raw["manifest"]["time_limit"] == 300 and raw["provenance"]["time_limit"] == "flag --time"
    shown = subprocess.run(
        [sys.executable, "-m", "rbs", "job", "show", job],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "target //app:job" in shown and "flag --time" in shown
    bad = subprocess.run(
        [sys.executable, "-m", "rbs", "job", "submit", "//app:nope"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "no such target //app:nope" in bad.stderr


def test_a_timeout_is_not_retried(cluster: JobCluster, client: JobsClient, tmp_path: Path) -> None:
    root = write_ws(
        tmp_path / "ws",
        {
            "app/BUILD": LOAD
            + 'sh_binary(name = "slow", srcs = ["slow.sh"])\n'
            + 'ml_training_job(name = "job", binary = ":slow", time_limit = "1s",\n'
            + '                max_retries = 3, memory = "64Mi")\n',
            "app/slow.sh": '#!/bin/sh\necho "attempt $RBS_ATTEMPT"\nexec sleep 60\n',
        },
    )
    job, manifest = submit_target(client, root)
    assert manifest.time_limit == 1
    info = cluster.wait(job)
    assert (info.state, info.raw["attempts"]) == ("TIMEOUT", 1)
    assert out_lines(client, job) == ["attempt 1"]


def test_inputs_stage_a_plain_target_by_file_name(tmp_path: Path) -> None:
    from rbs.client.staging import collect_entries
    from rbs.model import DigestFunction

    root = write_ws(
        tmp_path / "ws",
        {
            "app/BUILD": 'filegroup(name = "cfg", srcs = ["a.json", "sub/b.json"])\n'
            + 'filegroup(name = "dup", srcs = ["a.json", "sub/a.json"])\n',
            "app/a.json": "{}\n",
            "app/sub/b.json": "[]\n",
            "app/sub/a.json": "[1]\n",
        },
    )
    entries, sources = collect_entries(["conf=//app:cfg"], root, DigestFunction.BLAKE3)
    assert set(entries) == {"conf/a.json", "conf/b.json"}
    assert {p.read_text() for p in sources.values()} == {"{}\n", "[]\n"}
    with pytest.raises(JobError, match=r"two outputs named 'a\.json'"):
        collect_entries(["conf=//app:dup"], root, DigestFunction.BLAKE3)
    with pytest.raises(JobError, match="no such target //app:nope"):
        collect_entries(["x=//app:nope"], root, DigestFunction.BLAKE3)
