"""The job runner of rbs.client.JobExecutor, run as the worker runs it: its version check
and its results, in a bundle laid out by hand."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cloudpickle

from rbs.client import pybundle, pyrun


def _bundle(work: Path, spec: dict[str, str], fn: object, calls: list[object]) -> None:
    here = work / pyrun.BUNDLE_DIR
    (here / "calls").mkdir(parents=True)
    shutil.copy(pyrun.__file__, here / "pyrun.py")
    shutil.copytree(Path(cloudpickle.__file__).parent, here / "cloudpickle")
    (here / "spec.json").write_text(json.dumps(spec))
    (here / "fn.pkl").write_bytes(cloudpickle.dumps(fn))
    (here / "calls" / "0.pkl").write_bytes(cloudpickle.dumps(calls))


def _run(work: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, f"{pyrun.BUNDLE_DIR}/pyrun.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_calls_run_in_order_and_a_raise_is_kept(tmp_path: Path) -> None:
    _bundle(tmp_path, pybundle.caller_versions(), divmod, [((7, 2), {}), ((1, 0), {})])
    r = _run(tmp_path)
    assert r.returncode == 1, r.stderr
    outcomes = cloudpickle.loads((tmp_path / pyrun.OUT_DIR / "result.pkl").read_bytes())
    assert outcomes[0] == (True, (3, 1), "")
    ok, exc, tb = outcomes[1]
    assert not ok and isinstance(exc, ZeroDivisionError)
    assert "ZeroDivisionError" in tb and "ZeroDivisionError" in r.stderr


def test_a_mismatch_is_refused_before_unpickling(tmp_path: Path) -> None:
    spec = {"python": "3.1", "cloudpickle": "9.9.9", "interpreter": "python3"}
    _bundle(tmp_path, spec, divmod, [((1, 1), {})])
    r = _run(tmp_path)
    assert r.returncode == pyrun.MISMATCH_EXIT
    here = pybundle.caller_versions()
    want = (
        "the caller runs Python 3.1 with cloudpickle 9.9.9, the worker's python3 is "
        f"Python {here['python']} with cloudpickle {here['cloudpickle']}"
    )
    assert want in (tmp_path / pyrun.OUT_DIR / "error.txt").read_text()
    assert want in r.stderr
    assert not (tmp_path / pyrun.OUT_DIR / "result.pkl").exists()


def test_version_problem_names_a_missing_cloudpickle() -> None:
    spec = {"python": "3.11", "cloudpickle": "3.1.2"}
    assert pyrun.version_problem(spec, "3.11", "3.1.2") is None
    msg = pyrun.version_problem(spec, "3.11", None)
    assert msg is not None and "cloudpickle (none)" in msg


def test_importing_the_client_does_not_load_the_executor() -> None:
    code = "import rbs.client.jobs, sys; print('cloudpickle' in sys.modules, 'rbs.client.pyexec' in sys.modules)"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert r.stdout.split() == ["False", "False"]
    code = "from rbs.client import JobExecutor; print(JobExecutor.__module__)"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert r.stdout.strip() == "rbs.client.pyexec"
