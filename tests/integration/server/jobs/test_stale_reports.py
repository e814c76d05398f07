"""Fencing by attempt: a report of an attempt the server has given up changes nothing,
and the run it speaks for is told to stop over the stream it came on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from jobs_harness import JobCluster, wait_for

from rbs.model import LogLine, LogStream
from rbs.scheduler.events import Requeue, TaskRef
from rbs.wire.workers_jobs import (
    JobFinishedReport,
    JobReport,
    JobStartedReport,
    KillOrder,
    LogBatch,
    ResultAck,
)

pytestmark = pytest.mark.chaos


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


def test_stale_reports_on_a_live_stream_are_answered_with_a_kill(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "server")
    attempts = tmp_path / "attempts"
    try:
        worker = cluster.add_worker(tmp_path / "w1")
        received: list[Any] = []
        handler = worker.job_handler
        assert handler is not None

        async def spy(order: Any) -> None:
            received.append(order)
            await handler(order)

        worker.job_handler = spy
        client = cluster.client()
        script = f'echo "$RBS_ATTEMPT" >> {attempts}; echo "live $RBS_ATTEMPT"; exec sleep 60'
        job = client.submit(["sh", "-c", script])
        wait_for("attempt 1", lambda: attempts.exists() and attempts.read_text() == "1\n")
        assert cluster.server is not None
        driver = cluster.server.driver

        async def requeue() -> None:
            driver._post(Requeue(targets=(TaskRef(job_id=int(job)),)))

        cluster.call(requeue())
        wait_for("attempt 2", lambda: attempts.read_text() == "1\n2\n")
        wait_for("attempt 2 running", lambda: client.show(job).raw["attempts"] == 2)
        stale_lease = f"{job}.1.0"

        def lines(attempt: int, text: str) -> LogBatch:
            # The second claims the live attempt in its own fields: its lease decides.
            line = LogLine(
                seq=10_000 + attempt,
                time=time.time(),
                stream=LogStream.OUT,
                text=text,
                attempt=attempt,
            )
            return LogBatch(
                lease_id=stale_lease, job_id=job, task_index=-1, attempt=attempt, lines=(line,)
            )

        reports: list[JobReport] = [
            JobStartedReport(
                lease_id=stale_lease,
                job_id=job,
                task_index=-1,
                attempt=1,
                pid=1,
                started_at=time.time(),
            ),
            lines(1, "stale one"),
            lines(2, "stale two"),
            JobFinishedReport(
                lease_id=stale_lease,
                job_id=job,
                task_index=-1,
                attempt=1,
                state="COMPLETED",
                exit_code=0,
                finished_at_ns=time.time_ns(),
            ),
        ]

        async def report() -> None:
            for r in reports:
                await driver.job_message(worker.worker_id, r)

        before = len(received)  # the requeue's own kill among them
        cluster.call(report())

        def kills() -> list[KillOrder]:
            return [o for o in received[before:] if isinstance(o, KillOrder)]

        wait_for("a kill for each stale report", lambda: len(kills()) >= len(reports))
        assert {(k.lease_id, k.reason) for k in kills()} == {(stale_lease, "orphan")}
        wait_for(
            "the stale result acknowledged",
            lambda: any(isinstance(o, ResultAck) and o.lease_id == stale_lease for o in received),
        )
        client.show(job)
        time.sleep(0.5)  # several scheduler ticks: nothing may come of it
        info = client.show(job)
        assert info.state == "RUNNING" and info.raw["attempts"] == 2, info.raw
        assert attempts.read_text() == "1\n2\n"

        async def stored() -> list[LogLine]:
            return driver.logs.read(int(job))

        wait_for(
            "attempt 2's line", lambda: any(x.text == "live 2" for x in cluster.call(stored()))
        )
        by_attempt = {(x.text, x.attempt) for x in cluster.call(stored())}
        assert ("live 2", 2) in by_attempt
        assert not any(t.startswith("stale") and a == 2 for t, a in by_attempt), by_attempt
        client.cancel([job])
        assert cluster.wait(job).state == "CANCELLED"
        assert not any(
            isinstance(o, KillOrder) and o.lease_id == f"{job}.2.0" and o.reason != "cancel"
            for o in received
        )
    finally:
        cluster.stop()
