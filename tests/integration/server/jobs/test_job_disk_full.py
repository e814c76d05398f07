"""A full disk under the server's data dir: refused with 507, nothing lost, nothing run twice.

The data dir is a real size-limited filesystem (tmpfs, mounted for the test: tests run as
root; skipped where mounting is not permitted), filled to the last byte by a filler file.
"""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jobs_harness import JobCluster, wait_for

from rbs.client.http import ConnectError, HttpConnection, HttpError
from rbs.scheduler.config import SchedulerConfig
from rbs.wire import jobs_api_requests as req

pytestmark = pytest.mark.chaos

JOBS = SchedulerConfig(heartbeat_timeout=30.0, validate=True)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs for the server's data dir, unmounted afterwards."""
    mnt = tmp_path / "data"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)],
            capture_output=True,
            text=True,
        )
    except OSError as e:
        pytest.skip(f"cannot mount a size-limited tmpfs for the data dir: {e}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a size-limited tmpfs for the data dir: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Write a file of all the space left under `folder`; returns it."""
    filler = folder / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(chunk[:size])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    return filler


def _submit(conn: HttpConnection, command: list[str], request_id: str | None = None) -> Any:
    body: dict[str, Any] = {"command": command, "flags": {}, "input_root": None}
    if request_id is not None:
        body["request_id"] = request_id
    return conn.request("POST", req.JOBS_PATH, json_body=body).json()


def test_a_full_data_dir_refuses_with_507_and_recovers_without_a_restart(
    small_fs: Path, tmp_path: Path
) -> None:
    data, gate, runs = small_fs, tmp_path / "gate", tmp_path / "runs"
    runs.mkdir()
    cluster = JobCluster(data, jobs=JOBS)
    try:
        worker = cluster.add_worker(tmp_path / "w1", job_slots=1, cpus=1)
        client = cluster.client()
        script = (
            f'echo run >> {runs}/"$RBS_JOB_ID"; echo start; '
            f"while [ ! -e {gate} ]; do sleep 0.01; done; seq 1 50; echo done"
        )
        running = client.submit(["sh", "-c", script])
        pending = client.submit(["sh", "-c", f'echo run >> {runs}/"$RBS_JOB_ID"; echo later'])
        wait_for("the first job to log", lambda: list(client.logs(running)))
        assert client.show(pending).state == "PENDING"
        driver = cluster.server.driver if cluster.server else None
        assert driver is not None

        def jobs_known() -> list[int]:
            async def ids() -> list[int]:
                return driver.sched.job_ids()

            return cluster.call(ids())

        before = jobs_known()
        filler = _fill(data)

        # Refused, naming the data dir and what to do; the core is as it was.
        conn = HttpConnection("127.0.0.1", cluster.port + 1)
        for _ in range(2):
            with pytest.raises(HttpError) as err:
                _submit(conn, ["true"])
            assert err.value.status == 507, err.value.message
            assert err.value.code == "RESOURCE_EXHAUSTED"
            assert err.value.message == (
                f"free space under {data} (the job journal could not be written: "
                "database or disk is full)"
            )
            assert jobs_known() == before

        # The running job ends during the episode: its exit and last lines wait.
        gate.touch()
        host = worker.jobs
        assert host is not None

        async def slot_free() -> bool:
            return host.slots_used() == 0

        wait_for("the first job to end on the worker", lambda: cluster.call(slot_free()))
        assert client.show(running).state == "RUNNING"  # its end is not journaled yet
        assert client.show(pending).state == "PENDING"

        # Space is back: no restart, the exit goes in, the pending job starts on the idle
        # worker, the next submit gets the next id.
        filler.unlink()
        info = cluster.wait(running)
        assert info.state == "COMPLETED", info.raw
        assert cluster.wait(pending).state == "COMPLETED"
        later = _submit(conn, ["true"])["job_id"]
        assert int(later) == int(pending) + 1
        assert cluster.wait(later).state == "COMPLETED"

        def check_once() -> None:
            for job in (running, pending):
                assert (runs / job).read_text() == "run\n", f"job {job} ran more than once"
            lines = list(client.logs(running))
            assert [x.seq for x in lines] == list(range(1, len(lines) + 1))
            assert [x.text for x in lines if x.stream == "out"] == [
                "start",
                *map(str, range(1, 51)),
                "done",
            ]
            assert {x.attempt for x in lines} == {1}

        check_once()

        # And after a restart: nothing runs again, nothing is lost or doubled.
        cluster.stop_server()
        worker.connected.clear()
        cluster.start_server()
        wait_for("the worker to register again", worker.connected.is_set)
        client = cluster.client()
        for job in (running, pending, later):
            assert client.show(job).state == "COMPLETED"
        assert cluster.server is not None
        store = cluster.server.driver.store

        async def attempts(job: str) -> list[int]:
            return [t.attempt for t in store.task_history(int(job))]

        for job in (running, pending):
            assert cluster.call(attempts(job)) == [1], f"job {job} was started twice"
        check_once()
        conn.close()
    finally:
        cluster.stop()


def test_a_submit_sent_again_with_its_request_id_makes_one_job(tmp_path: Path) -> None:
    cluster = JobCluster(tmp_path / "data", jobs=JOBS)
    try:
        conn = HttpConnection("127.0.0.1", cluster.port + 1)
        first = _submit(conn, ["true"], "5b1f5c0e-3c55-4bd4-9a8e-1d2f5e6a7b8c")["job_id"]
        again = _submit(conn, ["true"], "5b1f5c0e-3c55-4bd4-9a8e-1d2f5e6a7b8c")["job_id"]
        assert again == first
        other = _submit(conn, ["true"], "another-id")["job_id"]
        assert other != first
        conn.close()

        cluster.stop_server()
        cluster.start_server()
        conn = HttpConnection("127.0.0.1", cluster.port + 1)
        after = _submit(conn, ["true"], "5b1f5c0e-3c55-4bd4-9a8e-1d2f5e6a7b8c")["job_id"]
        assert after == first
        jobs = conn.request("GET", req.jobs_path((), None, True)).json()["jobs"]
        assert sorted(j["job_id"] for j in jobs) == sorted([first, other])
        with pytest.raises(HttpError) as err:
            _submit(conn, ["true"], "not a request id!")
        assert err.value.status == 400 and "request_id" in err.value.message
        conn.close()
    finally:
        cluster.stop()


def test_the_client_retries_a_lost_submit_once_with_the_same_request_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = JobCluster(tmp_path / "data", jobs=JOBS)
    try:
        client = cluster.client()
        sent: list[Any] = []
        real = HttpConnection.request

        def lose_the_first_answer(self: HttpConnection, method: str, path: str, **kw: Any) -> Any:
            resp = real(self, method, path, **kw)
            if method == "POST" and path == req.JOBS_PATH:
                sent.append(kw["json_body"])
                if len(sent) == 1:  # the server made the job; its answer is lost
                    self.close()
                    raise ConnectError("lost the connection (test)")
            return resp

        monkeypatch.setattr(HttpConnection, "request", lose_the_first_answer)
        job = client.submit(["true"])
        assert len(sent) == 2 and sent[0] == sent[1] and sent[0]["request_id"]
        monkeypatch.undo()
        with contextlib.closing(HttpConnection("127.0.0.1", cluster.port + 1)) as conn:
            jobs = conn.request("GET", req.jobs_path((), None, True)).json()["jobs"]
        assert [j["job_id"] for j in jobs] == [job]
    finally:
        cluster.stop()


def test_a_server_restarted_while_the_disk_is_full_runs_an_ended_job_once(
    small_fs: Path, tmp_path: Path
) -> None:
    data, gate, runs = small_fs, tmp_path / "gate", tmp_path / "runs"
    runs.mkdir()
    cluster = JobCluster(data, jobs=JOBS)
    try:
        worker = cluster.add_worker(tmp_path / "w1", job_slots=1, cpus=1)
        client = cluster.client()
        script = (
            f'echo run >> {runs}/"$RBS_JOB_ID"; echo start; '
            f"while [ ! -e {gate} ]; do sleep 0.01; done; seq 1 50; echo done"
        )
        job = client.submit(["sh", "-c", script])
        wait_for("the job to log", lambda: list(client.logs(job)))
        filler = _fill(data)

        # The job ends during the episode; its exit is not journaled, so its worker keeps it.
        gate.touch()
        host = worker.jobs
        assert host is not None

        async def slot_free() -> bool:
            return host.slots_used() == 0

        wait_for("the job to end on the worker", lambda: cluster.call(slot_free()))
        assert client.show(job).state == "RUNNING"

        # Restarted with the disk still full: it comes up, takes the worker back, refuses
        # submits with 507, and holds the exit the worker sends again.
        cluster.stop_server()
        worker.connected.clear()
        cluster.start_server()
        wait_for("the worker to register again", worker.connected.is_set)
        assert cluster.server is not None
        client = cluster.client()
        conn = HttpConnection("127.0.0.1", cluster.port + 1)
        for _ in range(2):
            with pytest.raises(HttpError) as err:
                _submit(conn, ["true"])
            assert err.value.status == 507, err.value.message
            assert err.value.code == "RESOURCE_EXHAUSTED"
            assert err.value.message.startswith(f"free space under {data} ")
        assert client.show(job).state == "RUNNING"

        # Space is back: the exit goes in once, the job is not started again.
        filler.unlink()
        info = cluster.wait(job)
        assert info.state == "COMPLETED", info.raw
        assert (runs / job).read_text() == "run\n", "the job ran more than once"
        store = cluster.server.driver.store

        async def attempts() -> list[int]:
            return [t.attempt for t in store.task_history(int(job))]

        assert cluster.call(attempts()) == [1], "the job was started twice"
        lines = list(client.logs(job))
        assert [x.seq for x in lines] == list(range(1, len(lines) + 1))
        assert [x.text for x in lines if x.stream == "out"] == [
            "start",
            *map(str, range(1, 51)),
            "done",
        ]
        assert {x.attempt for x in lines} == {1}
        later = _submit(conn, ["true"])["job_id"]
        assert int(later) == int(job) + 1
        assert cluster.wait(later).state == "COMPLETED"
        conn.close()
    finally:
        cluster.stop()
