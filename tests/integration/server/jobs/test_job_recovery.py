"""Jobs through failures: a worker killed mid-job, a server killed and restarted."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from jobs_harness import (
    JobCluster,
    kill_group,
    spawn_rbs,
    spawn_worker,
    stop_process,
    wait_for,
    wait_ready,
)

from rbs.scheduler.config import SchedulerConfig
from rbs.server.cluster import pick_port_pair

pytestmark = pytest.mark.chaos


@pytest.mark.parametrize("requeue", [True, False], ids=["requeued", "no-requeue"])
def test_job_on_a_killed_worker(tmp_path: Path, requeue: bool) -> None:
    cluster = JobCluster(tmp_path / "server")
    pid_file = tmp_path / "pid"
    attempts = tmp_path / "attempts"
    w1, ready, log = spawn_worker(cluster.address, tmp_path)
    try:
        w1_id = wait_ready(w1, ready, log)["worker_id"]
        client = cluster.client()
        script = (
            f'echo "$RBS_ATTEMPT" >> {attempts}; '
            f'if [ "$RBS_ATTEMPT" = 1 ]; then echo $$ > {pid_file}.tmp; '
            f"mv {pid_file}.tmp {pid_file}; exec sleep 60; fi; echo second run"
        )
        flags = {} if requeue else {"no_requeue": True}
        job = client.submit(["sh", "-c", script], **flags)
        wait_for("the job to run on the first worker", pid_file.exists)
        cluster.add_worker(tmp_path / "w2")
        os.kill(w1.pid, signal.SIGKILL)
        w1.wait(10)
        info = cluster.wait(job)
        assert w1_id not in cluster.live_workers()
        if requeue:
            assert info.state == "COMPLETED"
            assert attempts.read_text().split() == ["1", "2"]
            out = [(x.attempt, x.text) for x in client.logs(job) if x.stream == "out"]
            assert out == [(2, "second run")]
            assert info.raw["attempts"] == 2
        else:
            assert info.state == "NODE_FAIL"
            assert attempts.read_text().split() == ["1"]
    finally:
        kill_group(pid_file)  # the first attempt outlived its worker
        stop_process(w1)
        cluster.stop()


def test_server_killed_and_restarted_loses_and_repeats_nothing(tmp_path: Path) -> None:
    port = pick_port_pair("127.0.0.1")
    data = tmp_path / "data"
    gate = tmp_path / "gate"
    runs = tmp_path / "runs"
    runs.mkdir()
    serve = [
        "remote",
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data),
        "--ready-file",
        str(tmp_path / "server.ready"),
    ]
    log = tmp_path / "server.log"
    server = spawn_rbs(serve, log)
    # Workers only; the server is the subprocess. Default heartbeat timeout: the worker's
    # reconnect backoff must fit in it.
    cluster = JobCluster(tmp_path / "unused", port=port, serve=False, jobs=SchedulerConfig())
    try:
        wait_ready(server, tmp_path / "server.ready", log)
        cluster.add_worker(tmp_path / "w1", job_slots=2, cpus=2)
        client = cluster.client()
        script = (
            f'echo start; echo run >> {runs}/"$RBS_JOB_ID"; '
            f"while [ ! -e {gate} ]; do sleep 0.01; done; seq 1 50; echo done"
        )
        jobs = [client.submit(["sh", "-c", script]) for _ in range(4)]
        wait_for("two jobs running", lambda: len(list(runs.iterdir())) == 2)
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        (tmp_path / "server.ready").unlink()
        # The two running jobs end while the server is down; their results wait.
        gate.touch()
        worker = cluster.workers[0][0]
        assert worker.jobs is not None
        host = worker.jobs

        async def ended_and_held() -> bool:  # read on the worker's own loop
            return host.slots_used() == 0 and len(host.held_leases()) == 2

        wait_for("both runs to end", lambda: cluster.call(ended_and_held()))
        server = spawn_rbs(serve, log)
        wait_ready(server, tmp_path / "server.ready", log)
        client = cluster.client()
        for job in jobs:
            info = cluster.wait(job)
            assert info.state == "COMPLETED", info.raw
            assert (runs / job).read_text() == "run\n", f"job {job} ran more than once"
            lines = list(client.logs(job))
            assert [x.seq for x in lines] == list(range(1, len(lines) + 1))
            out = [x.text for x in lines if x.stream == "out"]
            assert out == ["start", *map(str, range(1, 51)), "done"]
            assert {x.attempt for x in lines} == {1}
    finally:
        cluster.stop()
        stop_process(server)
