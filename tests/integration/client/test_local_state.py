"""The submit path finds a running local cluster from cluster.json and /proc alone, as
rbs.client.local would, and never takes a process that is not the cluster's for it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rbs.client import local_state
from rbs.client.local import running_local


def _fake(role: str, folder: Path) -> subprocess.Popen[bytes]:
    """A process whose command line reads like the cluster's server or worker for `folder`."""
    flag = "--data-dir" if role == local_state.SERVE else "--work-dir"
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdin.read()",
            "rbs",
            "remote",
            role,
            flag,
            str(folder),
        ],
        stdin=subprocess.PIPE,
    )


@pytest.fixture
def cluster(
    tmp_path: Path,
) -> Iterator[tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    home = tmp_path / "home"
    root = home / "local"
    root.mkdir(parents=True)
    server = _fake(local_state.SERVE, root / "server")
    worker = _fake(local_state.WORKER, root / "worker")
    try:
        yield home, server, worker
    finally:
        for p in (server, worker):
            p.kill()
            p.wait(30)


def _record(home: Path, **fields: object) -> None:
    (home / "local" / "cluster.json").write_text(json.dumps(fields))


def _full(
    server: subprocess.Popen[bytes], worker: subprocess.Popen[bytes], **over: object
) -> dict[str, object]:
    fields: dict[str, object] = {
        "host": "127.0.0.1",
        "grpc_port": 40001,
        "http_port": 40002,
        "server_pid": server.pid,
        "worker_pid": worker.pid,
        "server_started": local_state.started(server.pid),
        "worker_started": local_state.started(worker.pid),
    }
    fields.update(over)
    return fields


def test_a_running_cluster_is_found_with_its_address_as_rbs_client_local_finds_it(
    cluster: tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    home, server, worker = cluster
    _record(home, **_full(server, worker))
    assert local_state.running_address(home) == ("127.0.0.1", 40001)
    found = running_local(home, announce=False)
    assert found is not None and found.address == "127.0.0.1:40001"


def test_rbs_home_from_the_environment(
    cluster: tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home, server, worker = cluster
    _record(home, **_full(server, worker))
    monkeypatch.setenv("RBS_HOME", str(home))
    assert local_state.running_address() == ("127.0.0.1", 40001)
    monkeypatch.setenv("RBS_HOME", str(home.parent / "elsewhere"))
    assert local_state.running_address() is None


def test_nothing_recorded_or_a_record_that_does_not_read_is_not_a_cluster(
    cluster: tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    home, server, worker = cluster
    assert local_state.running_address(home) is None
    for text in ("", "{", "[1, 2]", '"text"', json.dumps({"host": "127.0.0.1"})):
        (home / "local" / "cluster.json").write_text(text)
        assert local_state.running_address(home) is None, text
    _record(home, **_full(server, worker, grpc_port="not a port"))
    assert local_state.running_address(home) is None


@pytest.mark.parametrize("which", ["server", "worker"])
def test_a_stopped_process_means_not_running(
    cluster: tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]], which: str
) -> None:
    home, server, worker = cluster
    _record(home, **_full(server, worker))
    proc = server if which == "server" else worker
    proc.kill()
    proc.wait(30)
    assert local_state.running_address(home) is None


def test_pids_of_other_processes_or_other_start_times_are_not_the_cluster(
    cluster: tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    home, server, worker = cluster
    # This very test process: alive, but not an rbs server.
    _record(home, **_full(server, worker, server_pid=os.getpid(), server_started=None))
    assert local_state.running_address(home) is None
    # The right process, but not the start time recorded: a reused pid.
    started = local_state.started(worker.pid)
    assert started is not None
    _record(home, **_full(server, worker, worker_started=started + 1))
    assert local_state.running_address(home) is None
    # Server and worker swapped: each command line names the other role.
    _record(home, **_full(worker, server))
    assert local_state.running_address(home) is None
    # Another home's cluster: the folders on the command lines are not this one's.
    other = tmp_path / "other"
    (other / "local").mkdir(parents=True)
    _record(other, **_full(server, worker))
    assert local_state.running_address(other) is None


def test_records_without_start_times_are_judged_on_the_command_line(
    cluster: tuple[Path, subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    home, server, worker = cluster
    fields = _full(server, worker)
    del fields["server_started"], fields["worker_started"]
    _record(home, **fields)
    assert local_state.running_address(home) == ("127.0.0.1", 40001)
