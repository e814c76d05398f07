"""`import rbs` loads nothing else; `rbs.JobExecutor` is the client's executor, on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_import_rbs_loads_no_submodule_and_offers_the_executor() -> None:
    code = (
        "import sys, rbs\n"
        "before = sorted(m for m in sys.modules if m.startswith('rbs.'))\n"
        "from rbs.client.pyexec import JobExecutor\n"
        "print(before, rbs.JobExecutor is JobExecutor)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "True"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    import rbs

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        rbs.Nope  # noqa: B018
