"""Fencing by attempt: a report of an attempt the server has given up changes nothing."""

from __future__ import annotations

import time
from pathlib import Path

from jobs_harness import JobCluster, wait_for

from rbs.scheduler.events import Requeue, TaskRef
from rbs.wire.workers_jobs import JobFinishedReport


def test_a_stale_job_finished_is_refused(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server")
    attempts = tmp_path / "attempts"
    try:
        worker = cluster.add_worker(tmp_path / "w1")
        client = cluster.client()
        job = client.submit(["sh", "-c", f'echo "$RBS_ATTEMPT" >> {attempts}; exec sleep 60'])
        wait_for("attempt 1", lambda: attempts.exists() and attempts.read_text() == "1\n")
        assert cluster.server is not None
        driver = cluster.server.driver

        async def requeue() -> None:
            driver._post(Requeue(targets=(TaskRef(job_id=int(job)),)))

        cluster.call(requeue())
        wait_for("attempt 2", lambda: attempts.read_text() == "1\n2\n")
        wait_for("attempt 2 running", lambda: client.show(job).raw["attempts"] == 2)
        stale = JobFinishedReport(
            lease_id=f"{job}.1.0",
            job_id=job,
            task_index=-1,
            attempt=1,
            state="COMPLETED",
            exit_code=0,
            finished_at_ns=time.time_ns(),
        )

        async def report() -> None:
            await driver.job_message(worker.worker_id, stale)

        cluster.call(report())
        # The next steps have run once a later request is answered.
        client.show(job)
        time.sleep(0.5)  # several scheduler ticks: nothing may come of it
        info = client.show(job)
        assert info.state == "RUNNING" and info.raw["attempts"] == 2, info.raw
        client.cancel([job])
        assert cluster.wait(job).state == "CANCELLED"
    finally:
        cluster.stop()
