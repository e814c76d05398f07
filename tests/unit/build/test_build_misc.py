"""Label round trips (hypothesis), query, and the plain progress display."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rbs.build.engine import Failure
from rbs.build.errors import BuildError
from rbs.build.graph import ActionSpec
from rbs.build.labels import Label, parse_label
from rbs.build.loader import Loader
from rbs.build.progress import PlainProgress
from rbs.build.query import run_query
from rbs.build.workspace import Workspace

_part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(_part, max_size=3), st.lists(_part, min_size=1, max_size=2))
def test_label_text_round_trips(pkg: list[str], name: list[str]) -> None:
    label = Label(package="/".join(pkg), name="/".join(name))
    assert parse_label(str(label)) == label
    assert parse_label(":" + label.name, package=label.package) == label


def test_query_deps_and_cycles(tmp_path: Path) -> None:
    (tmp_path / "WORKSPACE").touch()
    (tmp_path / "p").mkdir()
    (tmp_path / "p/BUILD").write_text(
        'genrule(name = "a", srcs = [":b"], outs = ["a.o"], cmd = "x")\n'
        'genrule(name = "b", srcs = ["in.txt"], outs = ["b.o"], cmd = "x")\n'
        'genrule(name = "c", srcs = [":d"], outs = ["c.o"], cmd = "x")\n'
        'genrule(name = "d", srcs = [":c"], outs = ["d.o"], cmd = "x")\n'
    )
    loader = Loader(Workspace(root=tmp_path))
    rows = run_query(loader, "deps(//p:a)")
    assert [(str(lab), kind) for lab, kind in rows] == [
        ("//p:a", "genrule rule"),
        ("//p:b", "genrule rule"),
        ("//p:in.txt", "source file"),
    ]
    assert [str(lab) for lab, _ in run_query(loader, "deps(//p:a, 1)")] == ["//p:a", "//p:b"]
    with pytest.raises(BuildError, match=r"dependency cycle: //p:c -> //p:d -> //p:c"):
        run_query(loader, "deps(//p:c)")
    with pytest.raises(BuildError, match="unsupported query"):
        run_query(loader, "rdeps(//..., //p:a)")


def test_plain_progress_prints_running_actions_and_failures() -> None:
    out = io.StringIO()
    p = PlainProgress(out)
    spec = ActionSpec(
        kind="run", mnemonic="Genrule", owner=Label(package="p", name="g"), outputs=("o",)
    )
    p.start(2)
    p.action_started(spec)
    p.action_finished(spec, how="executed")
    p.failure(Failure(spec=spec, message="exit code 1"))
    assert out.getvalue().splitlines() == [
        "[0/2] Genrule //p:g",
        "FAILED: Genrule //p:g: exit code 1",
    ]


def test_fast_build_command_line_parsing() -> None:
    from rbs.cli.build_fast import _patterns

    assert _patterns(["//...", "-j", "2", "--plain"]) == ["//..."]
    assert _patterns(["-j4", "//a:b", ":c", "--keep-going"]) == ["//a:b", ":c"]
    assert _patterns(["--help"]) is None
    assert _patterns(["-j", "x", "//..."]) is None
    assert _patterns([]) is None
