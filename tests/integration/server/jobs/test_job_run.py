"""Jobs end to end in one process: logs, environment, arrays, limits, cancel, exit codes."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
from jobs_harness import JobCluster, wait_for

from rbs.client.jobs import JobsClient
from rbs.executor import procs
from rbs.model import LogLine


def _lines(client: JobsClient, job: str) -> list[LogLine]:
    return list(client.logs(job))


def _texts(lines: list[LogLine], stream: str | None = None) -> list[str]:
    return [x.text for x in lines if stream is None or x.stream == stream]


def test_echo_completes_with_numbered_out_and_err_lines(
    cluster: JobCluster, client: JobsClient
) -> None:
    job = client.submit(["sh", "-c", "echo hello; echo err >&2"])
    info = cluster.wait(job)
    assert (info.state, info.exit_code) == ("COMPLETED", 0)
    lines = _lines(client, job)
    assert [x.seq for x in lines] == list(range(1, len(lines) + 1))
    assert ("out", "hello") in [(x.stream, x.text) for x in lines]
    assert ("err", "err") in [(x.stream, x.text) for x in lines]
    assert any(x.stream == "sys" and "ended COMPLETED" in x.text for x in lines)


def test_follow_streams_every_line_once_and_ends(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    script = f"echo first; while [ ! -e {gate} ]; do sleep 0.01; done; seq 1 300; echo last"
    job = client.submit(["sh", "-c", script])
    followed: list[LogLine] = []
    follower = cluster.client()

    def follow() -> None:
        followed.extend(follower.logs(job, follow=True))

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    wait_for("the follower to see the first line", lambda: "first" in _texts(followed))
    gate.touch()
    t.join(60)
    assert not t.is_alive(), "logs(follow=True) did not end when the job ended"
    assert cluster.wait(job).state == "COMPLETED"
    assert followed == _lines(client, job)
    assert _texts(followed, "out") == ["first", *map(str, range(1, 301)), "last"]


def test_environment_of_a_job(cluster: JobCluster, client: JobsClient) -> None:
    job = client.submit(
        ["sh", "-c", 'echo "id=$RBS_JOB_ID attempt=$RBS_ATTEMPT key=$KEY pwd=$PWD home=$HOME"'],
        env=["KEY=some value"],
    )
    assert cluster.wait(job).ok
    (out,) = _texts(_lines(client, job), "out")
    fields = dict(part.split("=", 1) for part in out.replace("some value", "some_value").split())
    assert fields["id"] == job
    assert fields["attempt"] == "1"
    assert fields["key"] == "some_value"
    assert fields["pwd"].endswith("/work")


def test_array_tasks_see_their_index(cluster: JobCluster, client: JobsClient) -> None:
    job = client.submit(["sh", "-c", 'echo "index=$RBS_ARRAY_INDEX"'], array="0-4")
    info = cluster.wait(job)
    assert info.state == "COMPLETED"
    seen = {(x.task, x.text) for x in _lines(client, job) if x.stream == "out"}
    assert seen == {(i, f"index={i}") for i in range(5)}


def test_array_throttle_runs_at_most_two_at_once(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    running = tmp_path / "running"
    running.mkdir()
    counts = tmp_path / "counts"
    # Each task marks itself running, records how many marks it sees, and unmarks itself.
    script = (
        f"touch {running}/$RBS_ARRAY_INDEX; ls {running} | wc -l >> {counts}; "
        f"sleep 0.2; rm {running}/$RBS_ARRAY_INDEX"
    )
    job = client.submit(["sh", "-c", script], array="0-5%2", cpus="0.1")
    peak = 0

    def done() -> bool:
        nonlocal peak
        info = client.show(job)
        if info.raw["array"] is not None:
            peak = max(peak, info.raw["array"]["running"])
        return info.done

    wait_for(f"array job {job}", done, timeout=60)
    assert client.show(job).state == "COMPLETED"
    seen = [int(n) for n in counts.read_text().split()]
    assert len(seen) == 6
    assert max(seen) <= 2
    assert 1 <= peak <= 2


def test_time_limit_ends_as_timeout_after_sigterm(cluster: JobCluster, client: JobsClient) -> None:
    script = 'trap "echo got TERM; exit 143" TERM; sleep 30 & wait'
    job = client.submit(["sh", "-c", script], time="1s")
    info = cluster.wait(job)
    assert info.state == "TIMEOUT"
    lines = _lines(client, job)
    assert "got TERM" in _texts(lines, "out")
    assert any("time limit reached" in t for t in _texts(lines, "sys"))


def test_cancel_kills_the_whole_process_group(
    cluster: JobCluster, client: JobsClient, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    script = f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; sleep 30 & sleep 30"
    job = client.submit(["sh", "-c", script])
    wait_for("the job to start", pid_file.exists)
    pgid = int(pid_file.read_text())
    assert procs.group_members(pgid)
    assert client.cancel([job]) == [job]
    info = cluster.wait(job)
    assert info.state == "CANCELLED"
    assert procs.group_members(pgid) == []


def test_memory_limit_ends_as_out_of_memory(cluster: JobCluster, client: JobsClient) -> None:
    worker = cluster.workers[0][0]
    assert worker.jobs is not None
    if worker.jobs.backend.name == "none":
        pytest.skip(f"no usable cgroups on this host: {worker.jobs.backend.describe()}")
    hog = "x = b'x' * (300 << 20); print(len(x))"
    job = client.submit([sys.executable, "-c", hog], memory_gb="0.0625")
    info = cluster.wait(job)
    assert info.state == "OUT_OF_MEMORY"
    assert info.raw["oom"] is True
    peak = info.raw["peak_memory_bytes"]
    assert peak is not None and 16 << 20 < peak <= 80 << 20
    assert any("out of memory" in t for t in _texts(_lines(client, job), "sys"))


def test_exit_code_3_fails(cluster: JobCluster, client: JobsClient) -> None:
    job = client.submit(["sh", "-c", "exit 3"])
    info = cluster.wait(job)
    assert (info.state, info.exit_code, info.ok) == ("FAILED", 3, False)


def test_missing_program_fails_with_a_reason(cluster: JobCluster, client: JobsClient) -> None:
    job = client.submit(["no-such-program-rbs", "x"])
    info = cluster.wait(job)
    assert info.state == "FAILED"
    assert any("not found" in t for t in _texts(_lines(client, job), "sys"))


def test_jobs_do_not_see_the_workers_environment(
    cluster: JobCluster, client: JobsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RBS_TEST_SECRET", "hidden")
    job = client.submit(["sh", "-c", 'echo "secret=${RBS_TEST_SECRET:-unset} path=$PATH"'])
    assert cluster.wait(job).ok
    (out,) = _texts(_lines(client, job), "out")
    assert out.startswith("secret=unset path=")
    assert out.split("path=", 1)[1] == os.environ["PATH"]


def test_gpu_jobs_get_their_own_cards(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server")
    try:
        cluster.add_worker(tmp_path / "w", gpus=("0", "1"))
        client = cluster.client()
        gate = tmp_path / "gate"
        script = f'echo "cards=$CUDA_VISIBLE_DEVICES"; while [ ! -e {gate} ]; do sleep 0.01; done'
        jobs = [client.submit(["sh", "-c", script], gpus=1) for _ in range(2)]
        plain = client.submit(["sh", "-c", 'echo "cards=[$CUDA_VISIBLE_DEVICES]"'])

        def cards(job: str) -> list[str]:
            return [x.text for x in client.logs(job) if x.stream == "out"]

        # Both GPU jobs run at once, each seeing one card, never the same one.
        seen = wait_for(
            "both GPU jobs to start",
            lambda: [c for j in jobs for c in cards(j)] if all(cards(j) for j in jobs) else None,
        )
        assert sorted(seen) == ["cards=0", "cards=1"]
        gate.touch()
        assert all(cluster.wait(j).ok for j in jobs)
        assert cluster.wait(plain).ok
        assert cards(plain) == ["cards=[]"]  # no GPUs asked for: none visible
    finally:
        cluster.stop()
