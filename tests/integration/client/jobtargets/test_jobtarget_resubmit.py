"""Versioned job targets: provenance (target, git commit, manifest digest), `rbs job
resubmit` from anywhere, inputs gone from the cluster, and `//pkg:target@REV`."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from jobs_harness import JobCluster
from jobtarget_ws import CAT_JOB, write_ws

from rbs.cas.digests import digest_from_pb
from rbs.cas.tree import read_directory
from rbs.cli.job_views import print_show
from rbs.cli.root import cli
from rbs.client.jobs import JobError, JobsClient
from rbs.client.resubmit import job_manifest, resubmit
from rbs.client.targets import build_job_target, stage_manifest_inputs
from rbs.client.versioned import manifest_digest, worktree_at
from rbs.model import Digest
from rbs.server.cas_metrics import CountingDiskStore
from rbs.server.config import CasConfig, ConfigError, config_from_dict
from rbs.server.input_pins import InputPins


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def git_ws(root: Path) -> Path:
    write_ws(root, CAT_JOB)
    (root / ".gitignore").write_text("rbs-out/\n.rbs/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    return root


def out_lines(client: JobsClient, job: str) -> list[str]:
    return [x.text for x in client.logs(job) if x.stream == "out"]


def submit_target(client: JobsClient, root: Path, target: str = "//app:job") -> str:
    manifest, prov = build_job_target(target, cwd=root)
    stage_manifest_inputs(client, manifest, cwd=root)
    return client.submit(None, manifest=manifest, provenance=prov)


def test_provenance_records_target_commit_dirtiness_and_manifest_digest(
    cluster: JobCluster,
    client: JobsClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = git_ws(tmp_path / "ws")
    head = git(root, "rev-parse", "HEAD")
    job = submit_target(client, root)
    assert cluster.wait(job).ok
    built, _ = build_job_target("//app:job", cwd=root)
    prov = client.show(job).raw["provenance"]
    assert prov["origin.target"] == "//app:job"
    assert prov["origin.commit"] == head and prov["origin.dirty"] == "false"
    assert prov["origin.manifest"] == str(manifest_digest(built))
    monkeypatch.setenv("COLUMNS", "240")
    print_show(client.show(job))
    shown = capsys.readouterr().out
    assert "//app:job" in shown and f"{head}  (clean tree)" in shown
    assert str(manifest_digest(built)) in shown
    # An uncommitted edit makes the tree dirty; the build outputs (rbs-out/) never do.
    (root / "app/data.txt").write_text("edited\n")
    dirty = submit_target(client, root)
    assert client.show(dirty).raw["provenance"]["origin.dirty"] == "true"


def test_resubmit_from_another_folder_runs_the_same_manifest_and_inputs(
    cluster: JobCluster, client: JobsClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = git_ws(tmp_path / "ws")
    job = submit_target(client, root)
    assert cluster.wait(job).ok
    # The workspace may change or go: the cluster holds what the job needs.
    (root / "app/data.txt").write_text("changed later\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = resubmit(client, job)
    assert cluster.wait(again).ok
    first, first_prov = job_manifest(client, job)
    second, second_prov = job_manifest(client, again)
    assert second.input_root == first.input_root and second.input_root is not None
    assert manifest_digest(second) == manifest_digest(first)
    assert second_prov["origin.manifest"] == first_prov["origin.manifest"]
    assert second_prov["origin.resubmit_of"] == job
    assert out_lines(client, again) == ["hello args=a1 attempt=1", "the data"]
    # Through the CLI, with an override layered on top.
    res = CliRunner().invoke(
        cli, ["job", "resubmit", job, "--server", cluster.address, "--priority", "9"]
    )
    assert res.exit_code == 0, res.output
    third = res.output.strip().splitlines()[-1]
    raw = client.show(third).raw
    assert raw["manifest"]["priority"] == 9 and raw["provenance"]["priority"] == "flag --priority"
    assert raw["manifest"]["input_root"] == str(first.input_root)


def _file_digest(cluster: JobCluster, root: Digest, path: str) -> Digest:
    assert cluster.server is not None
    store = cluster.server.parts.store
    d = root
    *dirs, name = path.split("/")
    for part in dirs:
        msg = read_directory(store, d)
        d = next(digest_from_pb(c.digest, root.function) for c in msg.directories if c.name == part)
    msg = read_directory(store, d)
    return next(digest_from_pb(f.digest, root.function) for f in msg.files if f.name == name)


def test_resubmit_after_eviction_names_the_missing_input(
    cluster: JobCluster, client: JobsClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = git_ws(tmp_path / "ws")
    job = submit_target(client, root)
    assert cluster.wait(job).ok
    manifest, _ = job_manifest(client, job)
    assert manifest.input_root is not None
    gone = _file_digest(cluster, manifest.input_root, "app/data.txt")
    assert cluster.server is not None
    assert cluster.server.parts.store.delete(gone)  # what eviction does
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(JobError) as e:
        resubmit(client, job)
    text = str(e.value)
    assert "app/data.txt" in text and "keep_inputs" in text
    assert "rbs job submit //app:job@" in text
    res = CliRunner().invoke(cli, ["job", "resubmit", job, "--server", cluster.address])
    assert res.exit_code == 2 and "app/data.txt" in res.output
    # From the workspace, whose build store still has the blob, it is staged again.
    monkeypatch.chdir(root)
    again = resubmit(client, job)
    assert cluster.wait(again).ok
    assert out_lines(client, again) == ["hello args=a1 attempt=1", "the data"]


def test_target_at_rev_builds_the_old_content_in_a_removed_worktree(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    root = git_ws(tmp_path / "ws")
    old = git(root, "rev-parse", "HEAD")
    (root / "app/data.txt").write_text("the new data\n")
    git(root, "commit", "-q", "-am", "second")
    job = submit_target(client, root, "//app:job@HEAD~1")
    assert cluster.wait(job).ok
    assert out_lines(client, job) == ["hello args=a1 attempt=1", "the data"]
    prov = client.show(job).raw["provenance"]
    assert prov["origin.commit"] == old and prov["origin.rev"] == "HEAD~1"
    assert prov["origin.dirty"] == "false"
    # The worktree is gone, and the checkout is untouched.
    assert len(git(root, "worktree", "list").splitlines()) == 1
    assert (root / "app/data.txt").read_text() == "the new data\n"
    assert git(root, "status", "--porcelain") == ""
    new = submit_target(client, root)
    assert cluster.wait(new).ok
    assert out_lines(client, new) == ["hello args=a1 attempt=1", "the new data"]
    # And a job built at REV can be resubmitted from anywhere too.
    again = resubmit(client, job, cwd=tmp_path)
    assert cluster.wait(again).ok
    assert out_lines(client, again) == ["hello args=a1 attempt=1", "the data"]


def test_rev_outside_a_git_work_tree_is_refused_naming_the_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_ws(tmp_path / "plain", CAT_JOB)
    with pytest.raises(JobError) as e:
        build_job_target("//app:job@HEAD~1", cwd=root)
    text = str(e.value)
    assert "//app:job@HEAD~1" in text and "not in a git work tree" in text
    assert "//pkg:target@REV" in text
    # The command line says the same, before it looks for a cluster, with no traceback.
    monkeypatch.chdir(root)
    res = CliRunner().invoke(cli, ["job", "submit", "//app:job@HEAD~1"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "rbs job submit: error: //app:job@HEAD~1" in res.output
    assert "not in a git work tree" in res.output
    ws = git_ws(tmp_path / "ws")
    with pytest.raises(JobError) as e:
        build_job_target("//app:job@no-such-rev", cwd=ws)
    assert "'no-such-rev' is not a commit, branch or tag" in str(e.value)
    with pytest.raises(JobError) as e:
        build_job_target("//app:job@", cwd=ws)
    assert "empty revision" in str(e.value)


@pytest.mark.parametrize("keep", [3600, 0])
def test_inputs_of_jobs_in_history_are_kept_from_eviction_for_keep_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: int
) -> None:
    cluster = JobCluster(tmp_path / "server", serve=False)
    try:
        # No lease: only [cas] keep_inputs stands between the job's tree and eviction.
        cas = CasConfig(lease=0, keep_inputs=keep)
        cluster.config = dataclasses.replace(cluster.config, cas=cas)
        cluster.start_server()
        cluster.add_worker(tmp_path / "w1")
        client = cluster.client()
        root = git_ws(tmp_path / "ws")
        job = submit_target(client, root)
        assert cluster.wait(job).ok
        assert cluster.server is not None
        store = cluster.server.parts.store
        assert isinstance(store, CountingDiskStore) and store.pins is not None
        pins, driver = store.pins, cluster.server.driver

        async def scan() -> None:  # what the server's loop does every SCAN_INTERVAL
            assert isinstance(pins, InputPins)
            pins.scan(driver)

        cluster.call(scan())
        store.gc(target=0)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        monkeypatch.chdir(elsewhere)
        if keep:
            again = resubmit(client, job)
            assert cluster.wait(again).ok
            assert out_lines(client, again) == ["hello args=a1 attempt=1", "the data"]
        else:
            with pytest.raises(JobError) as e:
                resubmit(client, job)
            assert "no longer has its whole input tree" in str(e.value)
    finally:
        cluster.stop()


def test_keep_inputs_reads_a_duration_and_names_a_bad_one() -> None:
    assert config_from_dict({"cas": {"keep_inputs": "7d"}}).cas.keep_inputs == 7 * 86400
    assert config_from_dict({"cas": {"keep_inputs": 0}}).cas.keep_inputs == 0
    with pytest.raises(ConfigError) as e:
        config_from_dict({"cas": {"keep_inputs": "forever"}})
    assert "[cas] keep_inputs" in str(e.value)


def test_resubmit_drops_a_deadline_that_has_passed_and_keeps_a_begin_time_ahead(
    cluster: JobCluster, client: JobsClient
) -> None:
    import time

    from jobs_harness import wait_for

    soon = time.time() + 3
    job = client.submit(["true"], deadline=str(int(soon) + 1))
    assert cluster.wait(job).ok
    wait_for("the deadline to pass", lambda: time.time() > soon + 2, timeout=60)
    res = CliRunner().invoke(cli, ["job", "resubmit", job, "--server", cluster.address])
    assert res.exit_code == 0, res.output
    assert "note: the job's deadline (" in res.output and "has passed" in res.output
    again = res.stdout.strip().splitlines()[-1]
    assert cluster.wait(again).ok  # carried over, the deadline would have cancelled it
    assert client.show(again).raw["manifest"]["deadline"] is None
    later = int(time.time()) + 3600
    waiting = client.submit(["true"], begin=later)
    res = CliRunner().invoke(cli, ["job", "resubmit", waiting, "--server", cluster.address])
    assert res.exit_code == 0, res.output
    assert "note: the new job keeps the begin time" in res.output
    kept = res.stdout.strip().splitlines()[-1]
    assert client.show(kept).raw["manifest"]["begin_time"] == later
    client.cancel([waiting, kept])


def test_a_rev_whose_commit_holds_a_build_store_uses_the_workspaces(tmp_path: Path) -> None:
    """A commit that (by mistake) holds `.rbs/cas` still builds at REV, with the
    workspace's own store linked in place of the committed one."""
    root = write_ws(tmp_path / "ws", CAT_JOB)
    (root / ".rbs" / "cas").mkdir(parents=True)
    (root / ".rbs" / "cas" / "committed").write_text("x\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "first")
    with worktree_at(root, git(root, "rev-parse", "HEAD")) as ws:
        store = ws / ".rbs" / "cas"
        assert store.is_symlink() and store.resolve() == (root / ".rbs" / "cas").resolve()
    assert (root / ".rbs" / "cas" / "committed").read_text() == "x\n"
