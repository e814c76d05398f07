"""Analysis: Starlark BUILD files and rules to action graphs, without running anything."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import BIN_DIR, ActionGraph
from rbs.build.labels import Label

MakeWs = Callable[[dict[str, str]], Path]


def graph_of(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def action_of(g: ActionGraph, owner: str) -> object:
    (a,) = [a for a in g.actions if str(a.owner) == owner and not a.is_test]
    return a


def test_genrule_make_variables_match_bazel(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/a.txt": "a",
            "pkg/BUILD": (
                'genrule(name = "g", srcs = ["a.txt"], outs = ["b.txt"], cmd = "cp $< $@; echo $(RULEDIR) $(@D)")\n'
                'genrule(name = "h", srcs = [":b.txt", "a.txt"], outs = ["c.txt", "d.txt"],\n'
                '        cmd = "cat $(SRCS) > $(location c.txt); echo $(OUTS) $(@D) > $(location :d.txt)")\n'
            ),
        }
    )
    g = graph_of(root)
    b = f"{BIN_DIR}/pkg/b.txt"
    a = action_of(g, "//pkg:g")
    assert a.argv == (
        "/bin/bash",
        "-c",
        f"set -euo pipefail; cp pkg/a.txt {b}; echo {BIN_DIR}/pkg {BIN_DIR}/pkg",
    )
    assert a.inputs == ("pkg/a.txt",) and a.outputs == (b,)
    h = action_of(g, "//pkg:h")
    assert h.inputs == (b, "pkg/a.txt")
    assert h.argv[2].endswith(
        f"cat {b} pkg/a.txt > {BIN_DIR}/pkg/c.txt; echo {BIN_DIR}/pkg/c.txt {BIN_DIR}/pkg/d.txt {BIN_DIR}/pkg > {BIN_DIR}/pkg/d.txt"
    )
    assert dict(a.env)["PATH"] == "/bin:/usr/bin:/usr/local/bin"


def test_custom_rule_with_provider_and_relative_load(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "lib/BUILD": "",
            "lib/defs.rbs": (
                'NameInfo = provider(fields = ["name"])\n'
                "def _name_impl(ctx):\n"
                "    return [NameInfo(name = ctx.attr.text)]\n"
                'named = rule(implementation = _name_impl, attrs = {"text": attr.string()})\n'
                "def _use_impl(ctx):\n"
                '    out = ctx.actions.declare_file(ctx.label.name + ".txt")\n'
                "    names = [d[NameInfo].name for d in ctx.attr.deps if NameInfo in d]\n"
                '    ctx.actions.write(output = out, content = ",".join(names))\n'
                "    return [DefaultInfo(files = depset([out]))]\n"
                'use = rule(implementation = _use_impl, attrs = {"deps": attr.label_list()})\n'
            ),
            "pkg/macros.rbs": 'load("//lib:defs.rbs", "named")\ndef two(name):\n    named(name = name + "_a", text = "A")\n    native.genrule(name = name + "_g", outs = [name + ".out"], cmd = "echo > $@")\n',
            "pkg/BUILD": 'load("//lib:defs.rbs", "use")\nload(":macros.rbs", "two")\ntwo(name = "x")\nuse(name = "u", deps = [":x_a"])\n',
        }
    )
    g = graph_of(root, "//pkg:all")
    w = action_of(g, "//pkg:u")
    assert w.kind == "write" and w.content == b"A"
    assert g.targets[Label(package="pkg", name="u")].files[0].path == f"{BIN_DIR}/pkg/u.txt"
    assert g.targets[Label(package="pkg", name="x_g")].kind == "genrule"


def test_py_binary_and_sh_tool_runfiles(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "py/BUILD": (
                'py_library(name = "lib", srcs = ["lib.py"])\n'
                'py_binary(name = "app", srcs = ["app.py"], deps = [":lib"], data = ["d.txt"])\n'
                'sh_binary(name = "tool", srcs = ["tool.sh"], data = ["d.txt"])\n'
                'genrule(name = "use", outs = ["o"], tools = [":tool"], cmd = "$(location :tool) > $@")\n'
                'py_test(name = "app_test", srcs = ["app_test.py"], deps = [":lib"])\n'
            ),
            "py/lib.py": "",
            "py/app.py": "",
            "py/app_test.py": "",
            "py/tool.sh": "",
            "py/d.txt": "",
        }
    )
    g = graph_of(root)
    app = g.targets[Label(package="py", name="app")]
    assert app.executable is not None and app.executable.path == f"{BIN_DIR}/py/app"
    assert {f.short_path for f in app.runfiles} == {"py/app", "py/app.py", "py/lib.py", "py/d.txt"}
    use = action_of(g, "//py:use")
    # A genrule's tools are built in the exec configuration, under Bazel 4.2's host folder.
    tool = "bazel-out/host/bin/py/tool"
    assert use.argv[2].endswith(f"{tool} > {BIN_DIR}/py/o")
    assert (f"{tool}.runfiles/__main__/py/d.txt", "py/d.txt") in use.links
    tests = [a for a in g.actions if a.is_test]
    assert (
        len(tests) == 1 and tests[0].working_directory == f"{BIN_DIR}/py/app_test.runfiles/__main__"
    )


def test_glob_and_filegroup(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/BUILD": 'filegroup(name = "fg", srcs = glob(["**/*.txt"], exclude = ["skip.txt"]))\n',
            "pkg/a.txt": "",
            "pkg/d/b.txt": "",
            "pkg/skip.txt": "",
            "pkg/sub/BUILD": "",
            "pkg/sub/c.txt": "",
        }
    )
    g = graph_of(root, "//pkg:fg")
    assert [f.path for f in g.targets[Label(package="pkg", name="fg")].files] == [
        "pkg/a.txt",
        "pkg/d/b.txt",
    ]


# -- every error names file, line and column, and says what to do --------------------


def error_of(root: Path, pattern: str = "//...") -> BuildError:
    with pytest.raises(BuildError) as ei:
        load_and_analyze(root, [pattern])
    return ei.value


def test_syntax_error(make_ws: MakeWs) -> None:
    e = error_of(make_ws({"p/BUILD": "x = 1\ny = = 2\n"}))
    assert e.location is not None and e.location.file == "p/BUILD" and e.location.line == 2
    assert e.location.column > 0 and "Parse error" in e.message


def test_unknown_attribute_suggests(make_ws: MakeWs) -> None:
    e = error_of(
        make_ws({"p/BUILD": '\ngenrule(name = "a", srcz = [], outs = ["o"], cmd = "x")\n'})
    )
    assert "no attribute 'srcz'" in e.message and "did you mean 'srcs'" in e.message
    assert str(e.location) == "p/BUILD:2:1"


def test_wrong_attribute_type(make_ws: MakeWs) -> None:
    e = error_of(
        make_ws({"p/BUILD": 'genrule(name = "a", srcs = "x.txt", outs = ["o"], cmd = "x")\n'})
    )
    assert "must be a list of labels, got string" in e.message
    assert str(e.location) == "p/BUILD:1:1"


def test_misspelled_label_suggests_closest(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/BUILD": (
                'genrule(name = "gen", outs = ["o"], cmd = "x")\n'
                'genrule(name = "use", srcs = [":gne"], outs = ["u"], cmd = "x")\n'
            )
        }
    )
    e = error_of(root)
    assert "no such target //p:gne" in e.message and e.hint == "did you mean //p:gen?"
    assert str(e.location) == "p/BUILD:2:1"


def test_missing_package(make_ws: MakeWs) -> None:
    root = make_ws(
        {"p/BUILD": 'genrule(name = "a", srcs = ["//nope:x"], outs = ["o"], cmd = "x")\n'}
    )
    e = error_of(root)
    assert "no such package //nope" in e.message and str(e.location) == "p/BUILD:1:1"
    e2 = error_of(root, "//pp:all")
    assert "no such package //pp" in e2.message and "did you mean //p" in e2.hint


def test_dependency_cycle_is_printed(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/BUILD": (
                'genrule(name = "a", srcs = [":b"], outs = ["a.o"], cmd = "x")\n'
                'genrule(name = "b", srcs = ["//q:c"], outs = ["b.o"], cmd = "x")\n'
            ),
            "q/BUILD": 'genrule(name = "c", srcs = ["//p:a"], outs = ["c.o"], cmd = "x")\n',
        }
    )
    e = error_of(root, "//p:a")
    assert "dependency cycle: //p:a -> //p:b -> //q:c -> //p:a" in e.message
    assert e.location is not None and e.location.file in ("p/BUILD", "q/BUILD")


def test_duplicate_target_names(make_ws: MakeWs) -> None:
    root = make_ws({"p/BUILD": 'filegroup(name = "a")\n\nfilegroup(name = "a")\n'})
    e = error_of(root)
    assert "duplicate target name 'a'" in e.message and "p/BUILD:1:1" in e.message
    assert str(e.location) == "p/BUILD:3:1"


def test_fail_in_rule_names_fail_site_and_target(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.rbs": 'def _impl(ctx):\n    fail("bad value: " + ctx.attr.v)\nr = rule(implementation = _impl, attrs = {"v": attr.string()})\n',
            "p/BUILD": 'load(":defs.rbs", "r")\nr(name = "t", v = "zz")\n',
        }
    )
    e = error_of(root)
    assert "bad value: zz" in e.message and "//p:t" in e.message and "p/BUILD:2:1" in e.message
    assert e.location is not None and e.location.file == "p/defs.rbs" and e.location.line == 2


def test_def_in_build_file_is_refused(make_ws: MakeWs) -> None:
    e = error_of(make_ws({"p/BUILD": "def f():\n    pass\n"}))
    assert e.location is not None and e.location.file == "p/BUILD" and e.location.line == 1
    assert ".rbs" in e.hint


def test_error_inside_loaded_rbs_points_at_it(make_ws: MakeWs) -> None:
    root = make_ws({"p/defs.rbs": "x = 1 +\n", "p/BUILD": 'load(":defs.rbs", "x")\n'})
    e = error_of(root)
    assert e.location is not None and e.location.file == "p/defs.rbs"


def test_load_of_missing_file(make_ws: MakeWs) -> None:
    e = error_of(make_ws({"p/BUILD": 'load(":nope.rbs", "x")\n'}))
    assert "nope.rbs" in e.message and str(e.location).startswith("p/BUILD:1")
    e2 = error_of(
        make_ws({"q/BUILD": 'load(":defz.rbs", "x")\n', "q/defs.rbs": "x = 1\n"}), "//q:all"
    )
    assert "did you mean //q:defs.rbs?" in e2.message


def test_missing_mandatory_and_file_misplaced(make_ws: MakeWs) -> None:
    e = error_of(make_ws({"p/BUILD": 'genrule(name = "a", cmd = "x")\n'}))
    assert "mandatory attribute 'outs'" in e.message
    root = make_ws({"q/BUILD": 'py_library(name = "l", srcs = ["x.txt"])\n', "q/x.txt": ""})
    e2 = error_of(root, "//q:all")
    assert "misplaced" in e2.message and ".py" in e2.message


def test_undeclared_output_and_unproduced_file(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.rbs": (
                "def _impl(ctx):\n"
                '    ctx.actions.declare_file("never.txt")\n'
                "    return []\n"
                "r = rule(implementation = _impl)\n"
            ),
            "p/BUILD": 'load(":defs.rbs", "r")\nr(name = "t")\n',
        }
    )
    e = error_of(root)
    assert "'never.txt' but no action creates it" in e.message and str(e.location) == "p/BUILD:2:1"


def test_location_of_unknown_dependency_file(make_ws: MakeWs) -> None:
    e = error_of(
        make_ws(
            {
                "p/BUILD": 'genrule(name = "g", srcs = ["a.txx"], outs = ["o"], cmd = "x")\n',
                "p/a.txt": "",
            }
        )
    )
    assert e.hint == "did you mean //p:a.txt?"


def test_bazel_rule_set_loads_resolve_to_builtin_rules(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/BUILD": (
                'load("@rules_python//python:defs.bzl", "py_binary", "py_library")\n'
                'load("@rules_shell//shell:sh_test.bzl", "sh_test")\n'
                'py_library(name = "l", srcs = ["l.py"])\n'
                'py_binary(name = "b", srcs = ["b.py"], deps = [":l"])\n'
                'sh_test(name = "t", srcs = ["t.sh"])\n'
            ),
            "p/l.py": "",
            "p/b.py": "",
            "p/t.sh": "",
        }
    )
    g = graph_of(root)
    assert g.targets[Label(package="p", name="b")].kind == "py_binary"
    assert g.targets[Label(package="p", name="t")].is_test


def test_output_clashing_with_a_source_file(make_ws: MakeWs) -> None:
    e = error_of(
        make_ws({"p/BUILD": 'genrule(name = "g", outs = ["a.txt"], cmd = "x")\n', "p/a.txt": ""})
    )
    assert (
        "conflicts with the source file p/a.txt" in e.message and str(e.location) == "p/BUILD:1:1"
    )


def test_select_without_a_matching_condition_names_the_attribute_and_line(
    make_ws: MakeWs,
) -> None:
    e = error_of(
        make_ws(
            {
                "p/BUILD": 'config_setting(name = "c", define_values = {"m": "1"})\n'
                'genrule(name = "g", outs = ["o"], cmd = select({":c": "x"}))\n'
            }
        )
    )
    assert 'attribute "cmd" in genrule //p:g' in e.message and "    //p:c" in e.message
    assert str(e.location).startswith("p/BUILD:2")
