"""What a worker says about pulling images: `--container-pull` and the registry probe."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rbs.executor.containers import ContainerEngine, ContainerSettings, answers


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
