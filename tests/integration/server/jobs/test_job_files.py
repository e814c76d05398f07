"""Jobs with dependencies, staged inputs and collected outputs."""

from __future__ import annotations

from pathlib import Path

from jobs_harness import JobCluster

from rbs.client.jobs import JobsClient


def test_afterok_chain_runs_in_order(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    order = tmp_path / "order"
    first = client.submit(["sh", "-c", f"sleep 0.2; echo a >> {order}"])
    second = client.submit(["sh", "-c", f"echo b >> {order}"], deps=f"afterok:{first}")
    third = client.submit(["sh", "-c", f"echo c >> {order}"], deps=f"afterok:{second}")
    assert cluster.wait(third).state == "COMPLETED"
    assert order.read_text().split() == ["a", "b", "c"]


def test_afterok_on_a_failed_job_is_cancelled(cluster: JobCluster, client: JobsClient) -> None:
    failing = client.submit(["sh", "-c", "exit 1"])
    dependent = client.submit(["true"], deps=f"afterok:{failing}")
    info = cluster.wait(dependent)
    assert (info.state, info.reason) == ("CANCELLED", "DependencyNeverSatisfied")
    assert cluster.wait(failing).state == "FAILED"


def test_staged_inputs_appear_and_a_resubmit_uploads_only_the_change(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    src = tmp_path / "project"
    (src / "data" / "sub").mkdir(parents=True)
    (src / "data" / "a.txt").write_text("alpha\n")
    (src / "data" / "sub" / "b.txt").write_text("beta\n")
    (src / "run.sh").write_text("cat data/a.txt data/sub/b.txt\n")
    first = client.stage(["data", "run.sh"], cwd=src)
    assert first.uploaded_blobs == first.files + 3  # plus root, data/ and data/sub/
    job = client.submit(["sh", "run.sh"], inputs=["data", "run.sh"], cwd=src)
    assert cluster.wait(job).ok
    assert [x.text for x in client.logs(job) if x.stream == "out"] == ["alpha", "beta"]

    (src / "data" / "sub" / "b.txt").write_text("beta, changed\n")
    again = client.stage(["data", "run.sh"], cwd=src)
    # The changed file plus the three directories above it: nothing else crosses.
    assert again.uploaded_blobs == 4
    job = client.submit(["sh", "run.sh"], inputs=["data", "run.sh"], cwd=src)
    assert cluster.wait(job).ok
    assert [x.text for x in client.logs(job) if x.stream == "out"] == ["alpha", "beta, changed"]


def test_a_job_may_modify_its_inputs_without_touching_the_cache(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "f.txt").write_text("original\n")
    script = "echo scribbled > f.txt; cat f.txt"
    first = client.submit(["sh", "-c", script], inputs=["f.txt"], cwd=src)
    assert cluster.wait(first).ok
    again = client.submit(["cat", "f.txt"], inputs=["f.txt"], cwd=src)
    assert cluster.wait(again).ok
    assert [x.text for x in client.logs(again) if x.stream == "out"] == ["original"]


def _make_outputs(status: int) -> list[str]:
    script = (
        "printf 'out\\n' > out.txt; mkdir -p results/deep; printf 'r1' > results/r1.bin; "
        "printf 'r2' > results/deep/r2.txt; chmod +x results/r1.bin; "
        f"ln -s r1.bin results/link; exit {status}"
    )
    return ["sh", "-c", script]


def _check_outputs(root: Path) -> None:
    assert (root / "out.txt").read_bytes() == b"out\n"
    assert (root / "results" / "r1.bin").read_bytes() == b"r1"
    assert (root / "results" / "deep" / "r2.txt").read_bytes() == b"r2"
    assert (root / "results" / "link").is_symlink()
    assert (root / "results" / "link").readlink() == Path("r1.bin")


def test_outputs_are_recorded_and_downloadable(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    job = client.submit(_make_outputs(0), outputs=["out.txt", "results/", "never-made.txt"])
    assert cluster.wait(job).ok
    dest = client.outputs(job, tmp_path / "dl")
    _check_outputs(dest)
    assert sorted(p.name for p in dest.iterdir()) == ["out.txt", "results"]
    sys_lines = [x.text for x in client.logs(job) if x.stream == "sys"]
    assert any("'never-made.txt' was not created" in t for t in sys_lines)


def test_outputs_are_recorded_when_the_job_fails(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    job = client.submit(_make_outputs(7), outputs=["out.txt", "results"])
    info = cluster.wait(job)
    assert (info.state, info.exit_code) == ("FAILED", 7)
    _check_outputs(client.outputs(job, tmp_path / "dl"))


def test_checkpoint_dir_is_restored_on_retry(cluster: JobCluster, client: JobsClient) -> None:
    # Attempt 1 saves progress and fails; attempt 2 finds it and completes.
    script = (
        "mkdir -p ckpt; if [ -f ckpt/step ]; then echo resumed at $(cat ckpt/step); exit 0; fi; "
        "echo 41 > ckpt/step; exit 1"
    )
    job = client.submit(["sh", "-c", script], checkpoint_dir="ckpt", max_retries=1)
    info = cluster.wait(job)
    assert info.state == "COMPLETED"
    out = [(x.attempt, x.text) for x in client.logs(job) if x.stream == "out"]
    assert out == [(2, "resumed at 41")]
