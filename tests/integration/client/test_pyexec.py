"""rbs.JobExecutor against a real cluster (server + one in-process worker): results,
remote exceptions with their traceback, map as one array job, cancellation, uploads
counted in blobs, and the runner's version check."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError
from pathlib import Path

import pytest
from jobs_harness import JobCluster, wait_for

from rbs.client import JobExecutor as PublicExecutor
from rbs.client import pybundle
from rbs.client.pyexec import JobExecutor, JobFailed, RemoteTraceback

pytestmark = pytest.mark.timeout(600)

THIS = sys.modules[__name__]
RESULT_S = 240  # generous: the machine may be loaded


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobCluster]:
    root = tmp_path_factory.mktemp("pyexec")
    c = JobCluster(root / "server")
    c.add_worker(root / "worker", job_slots=4, cpus=4)
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def ex(cluster: JobCluster) -> Iterator[JobExecutor]:
    e = PublicExecutor(cluster.client(), python=sys.executable, by_value=[THIS], cpus=1)
    try:
        yield e
    finally:
        e.shutdown(wait=True, cancel_futures=True)


def square_plus(x: int, *, plus: int = 0) -> int:
    return x * x + plus


class Boom(ValueError):
    pass


def explode(depth: int) -> None:
    if depth:
        explode(depth - 1)
    raise Boom(f"exploded at depth {depth}")


def wait_for_file(path: str) -> str:
    import os
    import time

    for _ in range(6000):  # bounded: 10 minutes at most
        if os.path.exists(path):
            return "saw it"
        time.sleep(0.1)
    return "never"


def test_result_comes_back(ex: JobExecutor) -> None:
    fut = ex.submit(square_plus, 7, plus=1)
    assert fut.result(timeout=RESULT_S) == 50
    assert fut.job_id.isdigit()
    assert ex.client.show(fut.job_id).name == "py-square_plus"


def test_remote_exception_is_raised_with_its_traceback(ex: JobExecutor) -> None:
    fut = ex.submit(explode, 2)
    with pytest.raises(Boom, match="exploded at depth 0") as info:
        fut.result(timeout=RESULT_S)
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert cause.tb.count("in explode") == 3  # the remote frames, each depth
    assert "Boom: exploded at depth 0" in cause.tb
    assert ex.client.show(fut.job_id).state == "FAILED"


def test_map_over_1000_items_is_one_array_job(ex: JobExecutor, cluster: JobCluster) -> None:
    client = cluster.client()
    before = {j.job_id for j in client.list_jobs(history=True)}
    out = list(ex.map(square_plus, range(1000), timeout=RESULT_S))
    assert out == [x * x for x in range(1000)]
    new = [j for j in client.list_jobs(history=True) if j.job_id not in before]
    parents = [j for j in new if j.raw.get("array")]
    assert len(parents) == 1, [j.raw for j in new]
    assert parents[0].state == "COMPLETED"


def test_map_chunksize_one_task_per_item(ex: JobExecutor) -> None:
    assert list(ex.map(square_plus, [1, 2, 3], chunksize=1, timeout=RESULT_S)) == [1, 4, 9]


def test_cancel_cancels_the_job(ex: JobExecutor, cluster: JobCluster, tmp_path: Path) -> None:
    flag = tmp_path / "never-made"
    fut = ex.submit(wait_for_file, str(flag))
    client = cluster.client()
    wait_for("the job to run", lambda: client.show(fut.job_id).state == "RUNNING", RESULT_S)
    assert fut.cancel()
    assert fut.cancelled()
    with pytest.raises(CancelledError):
        fut.result(timeout=1)
    info = wait_for("the job to end", lambda: (i := client.show(fut.job_id)).done and i, RESULT_S)
    assert info.state == "CANCELLED"


def test_the_same_function_again_uploads_nothing(ex: JobExecutor) -> None:
    assert ex.submit(square_plus, 12345).result(timeout=RESULT_S) == 12345**2
    first = ex.last_upload
    assert first is not None and first.uploaded_blobs > 0
    assert ex.submit(square_plus, 12345).result(timeout=RESULT_S) == 12345**2
    assert ex.last_upload is not None and ex.last_upload.uploaded_blobs == 0
    # New arguments: their call file and the folders above it, not the function.
    ex.submit(square_plus, 54321).result(timeout=RESULT_S)
    assert ex.last_upload is not None
    assert 0 < ex.last_upload.uploaded_blobs <= 4  # calls/0.pkl, calls/, _rbs/, the root


def test_a_version_mismatch_names_both_versions(
    ex: JobExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = pybundle.caller_versions()
    monkeypatch.setattr(
        pybundle, "caller_versions", lambda: {"python": "2.7", "cloudpickle": "0.1.0"}
    )
    fut = ex.submit(square_plus, 3)
    with pytest.raises(JobFailed) as info:
        fut.result(timeout=RESULT_S)
    msg = str(info.value)
    assert "the caller runs Python 2.7 with cloudpickle 0.1.0" in msg
    assert f"is Python {real['python']} with cloudpickle {real['cloudpickle']}" in msg


def test_futures_settle_from_many_threads(ex: JobExecutor) -> None:
    results: dict[int, int] = {}

    def one(i: int) -> None:
        results[i] = ex.submit(square_plus, i).result(timeout=RESULT_S)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RESULT_S)
    assert results == {0: 0, 1: 1, 2: 4}


def call_helper(x: int) -> str:
    import helper_mod  # staged with inputs=, not importable here

    return str(helper_mod.twice(x))


def test_a_local_module_travels_with_inputs(cluster: JobCluster, tmp_path: Path) -> None:
    (tmp_path / "helper_mod.py").write_text("def twice(x):\n    return 2 * x\n")
    e = JobExecutor(
        cluster.client(),
        python=sys.executable,
        by_value=[THIS],
        inputs=["helper_mod.py"],
        cwd=tmp_path,
    )
    try:
        assert e.submit(call_helper, 21).result(timeout=RESULT_S) == "42"
    finally:
        e.shutdown()


def test_cancelling_one_map_item_cancels_its_task(
    ex: JobExecutor, cluster: JobCluster, tmp_path: Path
) -> None:
    flags = [str(tmp_path / "go-0"), str(tmp_path / "never"), str(tmp_path / "go-2")]
    futures = ex.map_futures(wait_for_file, flags, chunksize=1)
    client = cluster.client()
    wait_for(
        "the tasks to run",
        lambda: client.show(futures[1].job_id).state == "RUNNING",
        RESULT_S,
    )
    assert futures[1].job_id.endswith("_1")
    assert futures[1].cancel()
    (tmp_path / "go-0").touch()
    (tmp_path / "go-2").touch()
    assert futures[0].result(timeout=RESULT_S) == "saw it"
    assert futures[2].result(timeout=RESULT_S) == "saw it"
    assert futures[1].cancelled()
    assert client.show(futures[1].job_id).state == "CANCELLED"
