"""Staging inputs and fetching outputs report every byte they move (what a bar draws)."""

from __future__ import annotations

import os
from pathlib import Path

from jobs_harness import JobCluster

from rbs.cas import transfer
from rbs.client.jobs import JobsClient


class Recorder:
    def __init__(self) -> None:
        self.total = 0
        self.done = 0
        self.steps: list[int] = []

    def expect(self, nbytes: int) -> None:
        self.total += nbytes

    def advance(self, nbytes: int) -> None:
        self.done += nbytes
        self.steps.append(nbytes)


def test_staging_reports_every_uploaded_byte_and_moves_within_a_big_file(
    client: JobsClient, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "big.bin").write_bytes(os.urandom(20 << 20))  # streamed: > 1 MiB
    (src / "small.txt").write_text("small\n")
    (src / "sub" / "b.txt").write_text("in a folder\n")
    rec = Recorder()
    with transfer.reporting(rec):
        staged = client.stage(["."], cwd=src)
    assert staged.uploaded_bytes > 20 << 20
    assert rec.total == rec.done == staged.uploaded_bytes
    assert max(rec.steps) < 20 << 20, "the big file was reported only once it had all gone"
    # Staged again, nothing is missing: nothing to send, nothing reported.
    again = Recorder()
    with transfer.reporting(again):
        assert client.stage(["."], cwd=src).uploaded_bytes == 0
    assert (again.total, again.done) == (0, 0)


def test_fetching_outputs_reports_the_whole_tree(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    script = (
        "mkdir -p out/deep; head -c 300000 /dev/zero > out/a; echo b > out/deep/b; echo b > out/c"
    )
    job = client.submit(["sh", "-c", script], outputs=["out"])
    assert cluster.wait(job).ok
    rec = Recorder()
    with transfer.reporting(rec):
        dest = client.outputs(job, tmp_path / "dl")
    assert (dest / "out" / "a").stat().st_size == 300000
    assert rec.done == rec.total
    assert rec.total > 300000  # the files and the Directory messages
