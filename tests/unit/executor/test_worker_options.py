"""Worker options: GPU lists, config validation, the stable worker id, machine defaults."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from rbs.cli.worker import _parse_gpus
from rbs.executor.machine import machine_resources
from rbs.executor.worker import WorkerConfig, worker_id_for
from rbs.server.worker_records import info_from_json


def test_gpu_lists() -> None:
    assert _parse_gpus(None) is None
    assert _parse_gpus("0,1, 3") == ("0", "1", "3")
    assert _parse_gpus("none") == ()
    with pytest.raises(click.BadParameter, match="separated by commas"):
        _parse_gpus("0;1")


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no port"):
        WorkerConfig(server="127.0.0.1:", work_dir=tmp_path)
    with pytest.raises(ValueError, match="--build-slots must not be negative"):
        WorkerConfig(server="127.0.0.1:1", work_dir=tmp_path, build_slots=-1)
    WorkerConfig(server="grpc://127.0.0.1:1", work_dir=tmp_path, build_slots=0)


def test_worker_id_is_stable_per_work_dir(tmp_path: Path) -> None:
    a = worker_id_for(tmp_path / "w")
    assert worker_id_for(tmp_path / "w") == a
    assert worker_id_for(tmp_path / "other") != a


def test_machine_resources_are_real() -> None:
    r = machine_resources()
    assert r.cpus >= 1 and r.memory_bytes > 1 << 20


def test_worker_records_from_other_versions_are_read() -> None:
    info = info_from_json('{"worker_id": "w", "build_slots": 2, "gpu_ids": ["0"], "new": 1}')
    assert info.worker_id == "w" and info.gpu_ids == ("0",) and info.build_slots == 2


def test_a_relative_work_dir_is_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--work-dir w1` means the folder where the worker started: the podman socket's URL
    (unix://...) and a container's mounts need its absolute path."""
    from click.testing import CliRunner

    import rbs.cli.worker as cli_worker

    seen: list[WorkerConfig] = []

    async def run(config: WorkerConfig, *_: object) -> None:
        seen.append(config)

    monkeypatch.setattr(cli_worker, "_run_worker", run)
    monkeypatch.chdir(tmp_path)
    args = ["--server", "127.0.0.1:1", "--work-dir", "w1", "--containers", "none"]
    res = CliRunner().invoke(cli_worker.worker, args)
    assert res.exit_code == 0, res.output
    assert seen[0].work_dir == tmp_path / "w1"
