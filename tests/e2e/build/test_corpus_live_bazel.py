"""One corpus workspace built by live Bazel 4.2.3 beside rbs: the recorded goldens are
what this Bazel builds today, and rbs's outputs are byte-identical to them."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from rbs.build.driver import BuildOptions, run_build

REPO = Path(__file__).resolve().parents[3]
CORPUS = REPO / "tests" / "fixtures" / "corpus"
NAME = "bazel_examples_make_variables"
BIN = "bazel-out/k8-fastbuild/bin/"


def _recorder() -> object:
    spec = importlib.util.spec_from_file_location(
        "record_bazel_goldens", REPO / "scripts" / "record_bazel_goldens.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.bazel
@pytest.mark.timeout(300)
def test_live_bazel_matches_the_goldens_and_rbs(tmp_path: Path) -> None:
    if shutil.which("bazel") is None:
        pytest.skip("bazel is not installed (make test installs Debian's bazel-bootstrap)")
    live = _recorder().record(CORPUS / NAME)  # type: ignore[attr-defined]
    golden = json.loads((CORPUS / "goldens.json").read_text())[NAME]
    assert live["outputs"] == golden["outputs"]
    ws = tmp_path / NAME
    shutil.copytree(CORPUS / NAME, ws)
    labels = sorted({v["target"] for v in golden["outputs"].values()})
    res = run_build(ws, labels, options=BuildOptions(jobs=2))
    assert res.ok, [f.message for f in res.report.failures]
    for path, want in golden["outputs"].items():
        got = (ws / "rbs-out/bin" / path[len(BIN) :]).read_bytes()
        assert hashlib.sha256(got).hexdigest() == want["sha256"], path
