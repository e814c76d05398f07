"""A BUILD file loads only the native rules it names; its errors read as if all were there."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import resolve_patterns
from rbs.build.errors import BuildError
from rbs.build.labels import parse_load_label
from rbs.build.loader import Loader
from rbs.build.workspace import Workspace

MakeWs = Callable[[dict[str, str]], Path]


def test_a_package_of_genrules_loads_no_other_rule_module(make_ws: MakeWs) -> None:
    root = make_ws({"p/BUILD": 'genrule(name = "g", outs = ["o.txt"], cmd = "touch $@")\n'})
    loader = Loader(Workspace(root=root))
    assert [str(x) for x in resolve_patterns(loader, ["//p:all"])] == ["//p:g"]
    assert parse_load_label("@rbs//genrule.rbs", package="") in loader.modules
    assert parse_load_label("@rbs//sh.rbs", package="") not in loader.modules


@pytest.mark.parametrize(
    ("build", "where", "message"),
    [
        ('filgroup(name = "x")\n', "p/BUILD:1:1", "did you mean `filegroup`?"),
        (
            'genrule(name = "g", outs = ["o"], cmd = "x")\nsh_binar(name = "s")\n',
            "p/BUILD:2:1",
            "did you mean `sh_binary`?",
        ),
        ('genrule(name = "g", outs = ["o"], cmd = X)\n', "p/BUILD:1:41", "`X` not found"),
    ],
)
def test_an_unknown_name_is_reported_with_every_native_in_scope(
    make_ws: MakeWs, build: str, where: str, message: str
) -> None:
    root = make_ws({"p/BUILD": build})
    with pytest.raises(BuildError) as ei:
        resolve_patterns(Loader(Workspace(root=root)), ["//p:all"])
    assert str(ei.value.location) == where
    assert message in ei.value.message


def test_a_macro_reaches_every_native_rule(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "m.rbs": "def mac(name):\n    native.sh_library(name = name, srcs = ['s.sh'])\n",
            "p/BUILD": 'load("//:m.rbs", "mac")\nmac(name = "lib")\n',
            "p/s.sh": "true\n",
        }
    )
    loader = Loader(Workspace(root=root))
    assert [str(x) for x in resolve_patterns(loader, ["//p:all"])] == ["//p:lib"]
    assert loader.packages["p"].targets["lib"].rule.kind == "sh_library"
