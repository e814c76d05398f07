"""Tests for scripts/check_layout.py, run on small planted trees."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check_layout.py"


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_layout", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


checker = _load_checker()

# A small tree that follows every rule; each test plants its own mistakes on top.
CLEAN: dict[str, str] = {
    "rbs/__init__.py": '"""rbs."""\n\n__version__ = "0.1.0"\n',
    "rbs/__main__.py": "from rbs.cli.main import main\n\nmain()\n",
    "rbs/model.py": '"""Data."""\n\n\nclass Job:\n    pass\n',
    "rbs/units.py": '"""Units."""\n\nMIB = 1 << 20\n',
    "rbs/wire/__init__.py": '"""Wire."""\n',
    "rbs/wire/reapi.py": "from rbs._proto import remote_pb2\nfrom rbs.model import Job\n",
    "rbs/cas/__init__.py": '"""CAS."""\n',
    "rbs/cas/store.py": "from rbs.units import MIB\n\n\nclass Store:\n    pass\n",
    "rbs/cas/disk.py": "from . import store\nfrom .store import Store\n",
    "rbs/scheduler/__init__.py": '"""Scheduler."""\n',
    "rbs/scheduler/core.py": "from rbs.model import Job\n",
    "rbs/server/__init__.py": '"""Server."""\n',
    "rbs/server/app.py": (
        "from typing import TYPE_CHECKING\n\n"
        "from rbs.cas.disk import Store\n"
        "from rbs.scheduler import core\n\n"
        "if TYPE_CHECKING:\n"
        "    from rbs.wire.reapi import Job\n"
    ),
    "rbs/client/__init__.py": '"""Client."""\n',
    "rbs/client/remote.py": "from rbs import __version__\nfrom rbs.cas.store import Store\n",
    "rbs/cli/__init__.py": '"""CLI."""\n',
    "rbs/cli/commands.py": (
        '"""The table."""\n\n'
        "COMMANDS: dict[str, tuple[str, str, str, str | None]] = {\n"
        '    "serve": ("rbs.cli.serve", "serve", "Run the server.", None),\n'
        '    "job": ("rbs.cli.jobs", "job", "Jobs.", "rbs.cli.job:main"),\n'
        "}\n"
    ),
    "rbs/cli/jobs.py": '"""Jobs group."""\n',
    "rbs/cli/main.py": (
        "import importlib\n\n"
        "from rbs.cli.commands import COMMANDS\n\n\n"
        "def main() -> None:\n"
        '    module, attr, _, _ = COMMANDS["serve"]\n'
        "    getattr(importlib.import_module(module), attr)()\n"
    ),
    "rbs/cli/serve.py": "from rbs.server.app import Store\n",
    "rbs/cli/job.py": "from rbs.client.remote import Store\n",
}


def plant(root: Path, files: dict[str, str]) -> Path:
    """Write the clean tree with `files` added or replaced, under root."""
    for relative, text in {**CLEAN, **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def found(root: Path, kind: str) -> list[Any]:
    return [v for v in checker.check(root) if v.kind == kind]


def test_clean_tree_has_no_violations(tmp_path: Path) -> None:
    assert checker.check(plant(tmp_path, {})) == []


def test_module_level_cycle(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/cas/a.py": "import rbs.cas.b\n", "rbs/cas/b.py": "\nimport rbs.cas.a\n"})
    [cycle] = found(tmp_path, "cycle")
    assert (cycle.path, cycle.line) == ("rbs/cas/a.py", 1)
    assert "rbs.cas.a -> rbs.cas.b -> rbs.cas.a" in cycle.message
    assert "rbs/cas/a.py:1, rbs/cas/b.py:2" in cycle.message


def test_cycle_through_function_level_import(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/a.py": "from rbs.cas.b import B\n",
            "rbs/cas/b.py": "class B:\n    def f(self) -> None:\n        from rbs.cas import a\n",
        },
    )
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cas.a -> rbs.cas.b -> rbs.cas.a" in cycle.message
    assert "rbs/cas/b.py:3" in cycle.message


def test_cycle_through_type_checking_import(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/a.py": "from rbs.cas.b import B\n",
            "rbs/cas/b.py": (
                "from typing import TYPE_CHECKING\n\n"
                "if TYPE_CHECKING:\n"
                "    from rbs.cas.a import A\n"
            ),
        },
    )
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cas.a -> rbs.cas.b -> rbs.cas.a" in cycle.message
    assert "rbs/cas/b.py:4" in cycle.message


def test_cycle_in_try_except_of_three_modules(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/a.py": "import rbs.cas.b\n",
            "rbs/cas/b.py": "import rbs.cas.c\n",
            "rbs/cas/c.py": "try:\n    import rbs.cas.a\nexcept ImportError:\n    pass\n",
        },
    )
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cas.a -> rbs.cas.b -> rbs.cas.c -> rbs.cas.a" in cycle.message


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/a.py": "from .b import B\n",
            "rbs/cas/b.py": "from . import a\n",
            "rbs/cas/x.py": "from ..server import app\n",
        },
    )
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cas.a -> rbs.cas.b -> rbs.cas.a" in cycle.message
    [arrow] = found(tmp_path, "arrow")
    assert (arrow.path, arrow.line) == ("rbs/cas/x.py", 1)
    assert "cas imports server" in arrow.message


def test_package_init_with_imports_closes_a_cycle(tmp_path: Path) -> None:
    # rbs.server.y imports rbs.cas.z, which runs rbs/cas/__init__.py first.
    files = {
        "rbs/cas/__init__.py": "from rbs.cas.x import X\n",
        "rbs/cas/x.py": "from rbs.server.y import Y\n",
        "rbs/cas/z.py": "Z = 1\n",
        "rbs/server/y.py": "from rbs.cas.z import Z\n",
    }
    plant(tmp_path, files)
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cas -> rbs.cas.x -> rbs.server.y -> rbs.cas" in cycle.message
    assert "rbs/server/y.py:1 (package __init__)" in cycle.message


def test_trivial_package_init_makes_no_cycle(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/__init__.py": '"""CAS."""\n',
            "rbs/cas/x.py": "from rbs.server.y import Y\n",
            "rbs/cas/z.py": "Z = 1\n",
            "rbs/server/y.py": "from rbs.cas.z import Z\n",
        },
    )
    assert found(tmp_path, "cycle") == []
    assert [v.path for v in found(tmp_path, "arrow")] == ["rbs/cas/x.py"]


def test_own_parent_package_makes_no_cycle(tmp_path: Path) -> None:
    # The package re-exports disk, and disk imports a sibling: no cycle, since the
    # package is already loading whenever disk runs.
    plant(
        tmp_path,
        {
            "rbs/cas/__init__.py": "from rbs.cas.disk import Disk\n",
            "rbs/cas/disk.py": "from rbs.cas.store import Store\n\n\nclass Disk:\n    pass\n",
        },
    )
    assert found(tmp_path, "cycle") == []


def test_arrow_up_the_layers(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/cas/x.py": '"""X."""\n\nfrom rbs.server.y import Y\n'})
    [arrow] = found(tmp_path, "arrow")
    assert (arrow.path, arrow.line) == ("rbs/cas/x.py", 3)
    assert "cas imports server (server is not below cas; layers: " in arrow.message


def test_model_may_not_import_proto(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/model.py": "from rbs._proto.rbs.v1 import workers_pb2\n"})
    [arrow] = found(tmp_path, "arrow")
    assert (arrow.path, arrow.line) == ("rbs/model.py", 1)
    assert (
        "model imports _proto (model is pure; protobuf conversion belongs in wire" in arrow.message
    )


def test_proto_outside_its_importers_is_a_violation(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/executor/worker.py": (
                '"""Worker."""\n\n'
                "from rbs._proto.rbs.v1 import workers_pb2 as w_pb2, workers_pb2_grpc\n"
            ),
            "rbs/server/job_driver.py": (
                "def send() -> None:\n    import rbs._proto.rbs.v1.workers_pb2\n"
            ),
            "rbs/client/remote.py": "from rbs._proto import remote_pb2\n",
        },
    )
    wrong = found(tmp_path, "proto-import")
    # One per import statement, at its line; function-level imports count too.
    assert [(v.path, v.line) for v in wrong] == [
        ("rbs/client/remote.py", 1),
        ("rbs/executor/worker.py", 3),
        ("rbs/server/job_driver.py", 2),
    ]
    assert "rbs.executor.worker imports rbs._proto" in wrong[1].message
    assert "convert through rbs/wire" in wrong[1].message
    assert "PROTO_IMPORTERS" in wrong[1].message
    assert found(tmp_path, "arrow") == []  # the layers allow it; only this rule refuses it


def test_proto_importers_may_import_proto(tmp_path: Path) -> None:
    proto = "from rbs._proto.build.bazel.remote.execution.v2 import remote_execution_pb2\n"
    plant(
        tmp_path,
        {
            "rbs/cas/digests.py": proto,
            "rbs/build/__init__.py": '"""Build."""\n',
            "rbs/build/protos.py": proto,
            "rbs/server/execution.py": proto,
            "rbs/server/workers_service.py": proto,
        },
    )
    assert checker.check(tmp_path) == []
    assert "rbs.server.grpc_server" in checker.PROTO_IMPORTERS
    assert "rbs.server.job_driver" not in checker.PROTO_IMPORTERS


def test_model_importing_proto_is_reported_once_as_an_arrow(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/model.py": "from rbs._proto.rbs.v1 import workers_pb2\n"})
    assert [v.kind for v in checker.check(tmp_path)] == ["arrow"]


def test_same_layer_import_is_an_arrow(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/client/x.py": "import rbs.server.app\n"})
    [arrow] = found(tmp_path, "arrow")
    assert arrow.path == "rbs/client/x.py"
    assert "client imports server (server is not below client" in arrow.message


def test_executor_importing_client_names_the_rule(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/executor/worker.py": "from rbs.client.remote import Store\n"})
    [arrow] = found(tmp_path, "arrow")
    assert arrow.path == "rbs/executor/worker.py"
    assert (
        "executor imports client (client is not below executor;"
        " the worker never depends on the client; layers: "
    ) in arrow.message


def test_root_package_imports_nothing(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/__init__.py": "from rbs.model import Job\n"})
    [arrow] = found(tmp_path, "arrow")
    assert arrow.path == "rbs/__init__.py"


LAZY_ROOT = (
    "def __getattr__(name):\n"
    "    if name == 'JobExecutor':\n"
    "        from {module} import JobExecutor\n"
    "        return JobExecutor\n"
    "    raise AttributeError(name)\n"
)


def test_root_export_is_imported_lazily_without_an_edge(tmp_path: Path) -> None:
    files = {
        "rbs/__init__.py": LAZY_ROOT.format(module="rbs.client.pyexec"),
        "rbs/client/__init__.py": "",
        "rbs/client/pyexec.py": "import rbs\nclass JobExecutor: ...\n",
    }
    plant(tmp_path, files)
    assert found(tmp_path, "arrow") == [] and found(tmp_path, "cycle") == []


def test_root_may_import_lazily_only_its_exports(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/__init__.py": LAZY_ROOT.format(module="rbs.model")})
    [arrow] = found(tmp_path, "arrow")
    assert arrow.path == "rbs/__init__.py" and "imports nothing" in arrow.message


def test_root_export_imported_at_module_level_is_an_arrow(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/__init__.py": "from rbs.client.pyexec import JobExecutor\n"})
    [arrow] = found(tmp_path, "arrow")
    assert arrow.path == "rbs/__init__.py"


def test_unknown_package(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/jobs/__init__.py": '"""Jobs."""\n', "rbs/jobs/x.py": "import rbs.cas\n"})
    [unknown] = found(tmp_path, "unknown-package")
    assert unknown.path == "rbs/jobs/__init__.py"
    assert "package jobs is not in LAYERS; add it to LAYERS" in unknown.message


def test_duplicate_public_class_but_not_private(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/a.py": "class Blob:\n    pass\n\n\nclass _Helper:\n    pass\n",
            "rbs/scheduler/b.py": "def f() -> None:\n    class Blob:\n        pass\n",
            "rbs/scheduler/c.py": "class _Helper:\n    pass\n",
        },
    )
    [duplicate] = found(tmp_path, "duplicate-class")
    assert (duplicate.path, duplicate.line) == ("rbs/cas/a.py", 1)
    assert "class Blob is defined 2 times" in duplicate.message
    assert "rbs/scheduler/b.py:2" in duplicate.message
    assert "_Helper" not in duplicate.message


def test_class_defined_twice_in_one_module(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/cas/a.py": "class Blob:\n    class Blob:\n        pass\n"})
    [duplicate] = found(tmp_path, "duplicate-class")
    assert "rbs/cas/a.py:1, rbs/cas/a.py:2" in duplicate.message


@pytest.mark.parametrize(("lines", "too_long"), [(500, False), (501, True)])
def test_long_module(tmp_path: Path, lines: int, too_long: bool) -> None:
    plant(tmp_path, {"rbs/cas/big.py": "x = 1\n" * lines})
    long = found(tmp_path, "long-module")
    if too_long:
        assert [(v.path, v.line) for v in long] == [("rbs/cas/big.py", 1)]
        assert "501 lines" in long[0].message
    else:
        assert long == []


def test_string_import_outside_the_owners(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "rbs/cas/a.py": 'import importlib\n\nimportlib.import_module("rbs.x")\n',
            "rbs/cas/b.py": 'mod = __import__("json")\n',
        },
    )
    wrong = found(tmp_path, "string-import")
    assert [(v.path, v.line) for v in wrong] == [("rbs/cas/a.py", 3), ("rbs/cas/b.py", 1)]
    assert "rbs/cli/commands.py COMMANDS" in wrong[0].message


def test_command_table_entry_can_close_a_cycle(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/cli/serve.py": "from rbs.cli.commands import COMMANDS\n"})
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cli.commands -> rbs.cli.serve -> rbs.cli.commands" in cycle.message
    assert "rbs/cli/commands.py:4 (COMMANDS)" in cycle.message


def test_fast_command_table_entry_is_an_edge(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/cli/job.py": "def main() -> None:\n    import rbs.cli.commands\n"})
    [cycle] = found(tmp_path, "cycle")
    assert "rbs.cli.commands -> rbs.cli.job -> rbs.cli.commands" in cycle.message


def test_script_exits_1_and_names_file_and_line(tmp_path: Path) -> None:
    plant(tmp_path, {"rbs/cas/x.py": '"""X."""\n\nfrom rbs.server.y import Y\n'})
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "rbs/cas/x.py:3: arrow: cas imports server" in result.stdout
    assert result.stdout.splitlines()[-1].startswith("layout: 1 violation (arrow 1)")


def test_script_exits_0_on_a_clean_tree(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(plant(tmp_path, {}))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout
    assert result.stdout == f"layout ok: {len(CLEAN)} modules, 18 imports\n"
