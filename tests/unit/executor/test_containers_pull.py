"""What a worker says about pulling images: `--container-pull` and the registry probe."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from rbs.executor import containers
from rbs.executor.containers import ContainerEngine, ContainerSettings, answers
from rbs.wire.workers_images import ImagesReport, LocalImageInfo


def test_the_probe_says_whether_a_registry_accepts_a_connection() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert answers(listening.getsockname())
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]  # bound, not listening: refused
            assert not answers(("127.0.0.1", port), timeout=5.0)


def test_yes_and_no_are_reported_as_said_and_a_bad_value_is_named(tmp_path: Path) -> None:
    given = "unix:///nonexistent/docker.sock"  # no engine is reached to make one
    for pull, said in (("yes", True), ("no", False), ("auto", None)):
        engine = ContainerEngine.for_worker(tmp_path, ContainerSettings(engine=given, pull=pull))
        assert engine is not None and engine.can_pull is said
    with pytest.raises(ValueError, match="--container-pull 'maybe': want auto, yes or no"):
        ContainerEngine.for_worker(tmp_path, ContainerSettings(engine=given, pull="maybe"))


def test_images_loaded_by_hand_are_reported_when_next_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image `podman load`ed after the worker connected is reported at the next
    listing (every RELIST_S), and an unchanged list is not sent again."""
    monkeypatch.setattr(containers, "REPORT_POLL_S", 0.01)
    monkeypatch.setattr(containers, "RELIST_S", 0.02)
    engine = ContainerEngine(tmp_path, "unix:///nowhere.sock", pull="no")
    loaded = LocalImageInfo(image_id="sha256:" + "a" * 64, names=("localhost/x:1",))
    lists = [(), (), (loaded,), (loaded,), (loaded,), (loaded,)]
    calls: list[int] = []
    done = threading.Event()

    def listing() -> ImagesReport:
        calls.append(1)
        if len(calls) >= len(lists):
            done.set()
        return ImagesReport(images=lists[min(len(calls), len(lists)) - 1], can_pull=False)

    sent: list[ImagesReport] = []
    monkeypatch.setattr(engine, "images_report", listing)
    engine.report_images(sent.append, lambda: True)
    try:
        assert done.wait(60), f"listed {len(calls)} times"
    finally:
        engine.stop()
    assert [r.images for r in sent[:2]] == [(), (loaded,)]
    assert len(sent) == 2  # the same list, listed again, is not sent again
