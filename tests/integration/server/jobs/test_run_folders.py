"""A worker hands a done run's folder on to the next run: every job still starts in an
empty work folder and TMPDIR, and its log holds its own lines only."""

from __future__ import annotations

from pathlib import Path

from jobs_harness import JobCluster, wait_for

from rbs.client.jobs import JobsClient

PROBE = 'echo "$PWD"; ls -A; ls -A "$TMPDIR"'


def _free(jobs_dir: Path) -> bool | None:
    return any(p.name.startswith(".free-") for p in jobs_dir.iterdir()) or None


def _out(client: JobsClient, job: str) -> list[str]:
    return [x.text for x in client.logs(job) if x.stream == "out"]


def test_jobs_after_others_start_clean_and_log_only_their_own_lines(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    jobs_dir = tmp_path / "w1" / "jobs"
    first = client.submit(["sh", "-c", "echo from the first"], array="0-3")
    assert cluster.wait(first).state == "COMPLETED"
    wait_for("a done run's folder to be free", lambda: _free(jobs_dir))
    # One that leaves files behind, then one that changes its folder's mode.
    messy = client.submit(["sh", "-c", 'touch left "$TMPDIR/t"; mkdir sub'])
    assert cluster.wait(messy).state == "COMPLETED"
    locked = client.submit(["sh", "-c", "chmod 700 ."])
    assert cluster.wait(locked).state == "COMPLETED"
    for _ in range(6):  # free folders and new ones alike
        probe = client.submit(["sh", "-c", PROBE])
        assert cluster.wait(probe).state == "COMPLETED"
        out = _out(client, probe)
        assert len(out) == 1 and out[0].endswith("/work"), out  # nothing in work/ or tmp/
        lines = list(client.logs(probe))
        assert not any("first" in x.text or "touch" in x.text for x in lines)
        assert any(
            x.stream == "sys" and "ended COMPLETED: exit code 0," in x.text for x in lines
        ), [(x.stream, x.text) for x in lines]
    # Nothing of the messy runs is left on the worker once they are acknowledged.
    wait_for(
        "the done runs' folders to be handed on or removed",
        lambda: all(p.name.startswith(".free-") for p in jobs_dir.iterdir()) or None,
    )
    for folder in jobs_dir.iterdir():
        assert sorted(p.name for p in folder.iterdir()) == ["log.jsonl", "tmp", "work"]
        assert (folder / "log.jsonl").stat().st_size == 0
        assert not any((folder / "work").iterdir()) and not any((folder / "tmp").iterdir())
