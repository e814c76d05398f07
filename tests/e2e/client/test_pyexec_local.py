"""rbs.client.JobExecutor against the embedded local cluster with no setup: from this
process with the default `python3`, and from a real notebook kernel (jupyter_client +
ipykernel), where the function is defined in the notebook's __main__."""

from __future__ import annotations

import queue
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from embedded import EmbeddedCluster

pytestmark = pytest.mark.timeout(600)
RESULT_S = 300

CLUSTER = EmbeddedCluster(down_timeout=120)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with CLUSTER.running(tmp_path_factory) as home:
        yield home


def _python3_version() -> str | None:
    exe = shutil.which("python3")
    if exe is None:
        return None
    r = subprocess.run(
        [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return r.stdout.strip() or None


def plus_one(x: int) -> int:
    return x + 1


@pytest.mark.skipif(
    _python3_version() != "{}.{}".format(*sys.version_info[:2]),
    reason="the default interpreter, python3 on PATH, is not this Python's major.minor",
)
def test_defaults_run_on_the_embedded_cluster(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in CLUSTER.env(home).items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("RBS_REMOTE", raising=False)
    from rbs.client import JobExecutor

    with JobExecutor(by_value=[sys.modules[__name__]]) as ex:
        assert ex.submit(plus_one, 41).result(timeout=RESULT_S) == 42
        assert list(ex.map(plus_one, range(5), timeout=RESULT_S)) == [1, 2, 3, 4, 5]


NOTEBOOK_CELL = """
import sys
from rbs import JobExecutor

def shout(word):
    return word.upper() + "!"

def fail():
    raise KeyError("missing in the job")

ex = JobExecutor(python=sys.executable)
print("RESULT", ex.submit(shout, "hello").result(timeout=TIMEOUT))
try:
    ex.submit(fail).result(timeout=TIMEOUT)
except KeyError as e:
    print("RAISED", repr(e), "remote" if "in fail" in str(e.__cause__) else "local")
ex.shutdown()
""".replace("TIMEOUT", str(RESULT_S))


def test_from_a_notebook_kernel(home: Path) -> None:
    try:
        from jupyter_client.manager import KernelManager
    except ImportError:
        pytest.skip(
            "jupyter_client and ipykernel are not installed: "
            "pip install -r requirements.lock installs them (test dependencies)"
        )
    km = KernelManager(kernel_name="python3")
    km.kernel_spec.argv[0] = sys.executable  # this venv's Python, with rbs importable
    km.start_kernel(env=CLUSTER.env(home), cwd=str(home))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        msg_id = kc.execute(NOTEBOOK_CELL)
        out: list[str] = []
        for _ in range(10_000):  # bounded: each message, or a 700 s wait, ends a turn
            try:
                msg: dict[str, Any] = kc.get_iopub_msg(timeout=700)
            except queue.Empty:
                break
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content = msg["content"]
            if msg["msg_type"] == "stream":
                out.append(content["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(content["traceback"]))
            elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                break
        text = "".join(out)
        assert "RESULT HELLO!" in text, text
        assert "RAISED KeyError('missing in the job') remote" in text, text
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.skipif(
    _python3_version() != "{}.{}".format(*sys.version_info[:2]),
    reason="the README's example uses python3 on PATH, not this Python's major.minor",
)
def test_the_readme_example_runs_as_a_script(home: Path) -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    section = readme.split("**Python functions as jobs.**", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = home / "example.py"
    script.write_text(code)
    r = subprocess.run(
        [sys.executable, str(script)],
        env=CLUSTER.env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=RESULT_S * 2,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[-2:] == ["{'width': 64, 'steps': 320}", "[3, 6, 9]"], r.stdout
