"""An embedded local cluster for e2e tests: its own RBS_HOME, the `rbs` runner, and its stop.

A test file makes one `EmbeddedCluster` (with the variables its jobs need and the
timeouts its commands take), runs `rbs` through it, and stops the cluster in a
module-scoped fixture however its tests ended:

    CLUSTER = EmbeddedCluster(env={"RBS_CONTAINER_PULL": "no"}, timeout=300)
    rbs = CLUSTER.rbs

    @pytest.fixture(scope="module")
    def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
        with CLUSTER.running(tmp_path_factory) as home:
            yield home

The first `rbs job ...` call starts the cluster under `home/local`; `running` ends with
`rbs remote down`, which must succeed. RBS_REMOTE and RBS_REMOTE_TOKEN are dropped
from the environment, so the calls never reach a cluster the caller named.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest


class EmbeddedCluster:
    """How one test file runs `rbs` against the embedded cluster of an RBS_HOME."""

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
        down_timeout: float = 60,
    ) -> None:
        self.extra_env = dict(env or {})  # set for every call (and so for the cluster)
        self.timeout = timeout  # of one `rbs` call
        self.down_timeout = down_timeout  # of the `rbs remote down` at the end

    def env(self, home: Path) -> dict[str, str]:
        """This process's environment, for the cluster under `home`."""
        env = {k: v for k, v in os.environ.items() if k not in ("RBS_REMOTE", "RBS_REMOTE_TOKEN")}
        env["RBS_HOME"] = str(home)
        return env | self.extra_env

    def rbs(
        self,
        home: Path,
        *args: str,
        cwd: Path | None = None,
        timeout: float | None = None,
        python: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """`python [PYTHON] -m rbs ARGS` in `cwd` (default `home`), its output captured as
        text; `python` takes interpreter options, e.g. ("-X", "importtime")."""
        return subprocess.run(
            [sys.executable, *python, "-m", "rbs", *args],
            env=self.env(home),
            cwd=cwd or home,
            capture_output=True,
            text=True,
            timeout=timeout or self.timeout,
            check=False,
        )

    @contextlib.contextmanager
    def running(self, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
        """A fresh RBS_HOME; its cluster (if a call started one) is stopped at the end."""
        home = tmp_path_factory.mktemp("rbs-home")
        try:
            yield home
        finally:
            # Always stop the local cluster, also when a test failed.
            r = self.rbs(home, "remote", "down", timeout=self.down_timeout)
            assert r.returncode == 0, r.stderr
