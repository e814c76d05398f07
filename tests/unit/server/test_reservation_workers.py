"""`rbs job reserve --workers` and `rbs remote drain` take a worker's id or its name."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from rbs.cli.job_reserve import drain
from rbs.scheduler.events import Window
from rbs.server.job_driver import JobRequestError
from rbs.server.reservations import Reservations


class Hub:
    def __init__(self, *workers: tuple[str, str]) -> None:
        self.views = [
            SimpleNamespace(info=SimpleNamespace(worker_id=i, name=n)) for i, n in workers
        ]
        self.draining: dict[str, bool] = {}

    def workers(self) -> list[Any]:
        return self.views

    def set_draining(self, worker_id: str, draining: bool) -> None:
        self.draining[worker_id] = draining


def reservations(tmp_path: Path, hub: Hub) -> Reservations:
    driver: Any = SimpleNamespace(hub=hub, _post=lambda _event: None)
    return Reservations(tmp_path, driver)


def test_a_unique_name_means_its_worker_and_an_id_itself(tmp_path: Path) -> None:
    r = reservations(tmp_path, Hub(("vm-1", "gpu1"), ("vm-2", "vm"), ("vm-3", "vm")))
    now = time.time()
    w = r.add(Window(name="m", start=now + 60, end=now + 120, workers=frozenset(["gpu1"])), now)
    assert w.workers == {"vm-1"} and r.windows["m"].workers == {"vm-1"}
    assert r.worker_id("vm-2") == "vm-2"
    # A name two workers share names neither: it stays unknown, and the error lists ids.
    with pytest.raises(JobRequestError, match="unknown worker vm; workers: vm-1, vm-2, vm-3"):
        r.add(Window(name="n", start=now + 600, end=now + 700, workers=frozenset(["vm"])), now)


def test_drain_errors_name_rbs_remote_drain() -> None:
    res = CliRunner().invoke(drain, ["--server", "127.0.0.1:1", "w3"])
    assert res.exit_code == 2
    assert res.output.startswith("rbs remote drain: error: ") and "Traceback" not in res.output
