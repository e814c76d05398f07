"""The Starlark environment: one builtins table per kind of file, the prelude as a .rbs file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import starlark as sl

from rbs.build.api import load_and_analyze
from rbs.build.compat import compat_text
from rbs.build.errors import BuildError
from rbs.build.starlark_env import (
    BUILD_BUILTINS,
    BUILD_FILE,
    GLOBALS,
    NATIVES,
    PRELUDE_NAME,
    RBS_BUILTINS,
    RBS_FILE,
    FileKind,
    prelude_text,
)

MakeWs = Callable[[dict[str, str]], Path]


def error_of(root: Path) -> BuildError:
    with pytest.raises(BuildError) as info:
        load_and_analyze(root, ["//p:all"])
    return info.value


def test_the_prelude_is_a_starlark_file_of_the_rbs_dialect() -> None:
    text = prelude_text()
    assert "def rule(" in text and "def rbs_call_impl(" in text
    sl.parse("prelude.rbs", text, RBS_FILE.dialect)  # raises on a syntax error
    assert Path(__file__).parents[3].joinpath("rbs/build/prelude.rbs").read_text() == text


def test_every_prelude_hook_into_python_is_in_the_rbs_table() -> None:
    called = {w for w in prelude_text().replace("(", " ").split() if w.startswith("_rbs_")}
    called -= {"_rbs_kind", "_rbs_compact", "_rbs_provider", "_rbs_target", "_rbs_p", "_rbs_apath"}
    # compat.rbs, evaluated before the prelude, defines the label helpers in Starlark.
    called -= {w for w in compat_text().replace("(", " ").split() if w.startswith("_rbs_")}
    assert called <= set(RBS_BUILTINS), called - set(RBS_BUILTINS)


def test_build_files_see_the_build_table_and_natives_and_no_private_hooks(
    make_ws: MakeWs,
) -> None:
    seen = [*BUILD_BUILTINS, *NATIVES]
    body = "X = [" + ", ".join(f"type({n})" for n in seen) + "]\n"
    root = make_ws({"p/BUILD": body + 'genrule(name = "g", outs = ["o"], cmd = "true")\n'})
    load_and_analyze(root, ["//p:all"])
    for hidden in ("_rbs_glob", "rule", "native"):
        root = make_ws({"p/BUILD": f"X = {hidden}\n"})
        e = error_of(root)
        assert e.location is not None and e.location.file == "p/BUILD", hidden


def test_rbs_files_see_the_rule_api_and_native(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.rbs": (
                "def m(name):\n"
                '    native.genrule(name = name, outs = [name + ".out"], cmd = "true")\n'
                "X = [type(rule), type(attr), type(provider), type(depset), type(DefaultInfo)]\n"
            ),
            "p/BUILD": 'load(":defs.rbs", "m")\nm("g")\n',
        }
    )
    _, graph = load_and_analyze(root, ["//p:all"])
    assert [str(a.owner) for a in graph.actions] == ["//p:g"]


def test_a_table_value_that_is_not_callable_is_set_as_a_global() -> None:
    kind = FileKind(
        name="t",
        dialect=BUILD_FILE.dialect,
        builtins={"ANSWER": lambda host, module: 42},
        natives=(),
        prelude=False,
    )
    m = sl.Module()
    kind.bind(m, None, None)  # type: ignore[arg-type]
    assert sl.eval(m, sl.parse("t", "ANSWER + 1", kind.dialect), GLOBALS) == 43


def test_fail_inside_the_prelude_points_at_the_users_call(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.rbs": (
                "def _impl(ctx):\n"
                '    ctx.runfiles(root_symlinks = {"x": "not a file"})\n'
                "    return []\n"
                "r = rule(implementation = _impl)\n"
            ),
            "p/BUILD": 'load(":defs.rbs", "r")\n\nr(name = "t")\n',
        }
    )
    e = error_of(root)
    assert "must map to a File" in e.message and "p/BUILD:3:1" in e.message
    assert e.location is not None and (e.location.file, e.location.line) == ("p/defs.rbs", 2)
    assert PRELUDE_NAME not in e.render()


def test_fail_inside_the_prelude_with_no_user_frame_points_at_the_target(
    make_ws: MakeWs,
) -> None:
    root = make_ws(
        {
            "p/defs.rbs": 'def _impl(ctx):\n    return "x"\nr = rule(implementation = _impl)\n',
            "p/BUILD": 'load(":defs.rbs", "r")\n\nr(name = "t")\n',
        }
    )
    e = error_of(root)
    assert "must return a list of providers" in e.message
    assert str(e.location) == "p/BUILD:3:1" and PRELUDE_NAME not in e.render()
