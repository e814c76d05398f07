"""Label() and Target objects, manual tags, private rule names, missing APIs (no actions run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import BIN_DIR, ActionGraph
from rbs.build.labels import Label

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
NameInfo = provider(fields = ["name"])

def _named_impl(ctx):
    return [NameInfo(name = ctx.attr.text), DefaultInfo(files = depset([ctx.file.src]))]

named = rule(implementation = _named_impl, attrs = {
    "text": attr.string(),
    "src": attr.label(allow_single_file = True),
})

def _report_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    lines = [str(ctx.label), "%s" % ctx.label, "{} {}".format(ctx.label.name, ctx.label.package)]
    lines.append(ctx.label.workspace_name + "|" + ctx.label.workspace_root)
    lines.append(str(ctx.label.relative(":other")) + " " + str(ctx.label.relative("//x:y")))
    lines.append(str(ctx.attr.tool.label) + " " + ctx.attr.tool.label.name)
    for d in ctx.attr.deps:
        has = "yes" if NameInfo in d else "no"
        name = d[NameInfo].name if NameInfo in d else "-"
        files = ",".join([f.short_path for f in d.files.to_list()])
        lines.append("%s %s %s %s %s" % (d.label, has, name, files, d[DefaultInfo].files.to_list()[0].basename))
    lines.append(str(Label("@rules_x//a:b").workspace_name) + " " + str(Label(":here")))
    lines.append(str(Label("//p:a") == Label("//p:a")))
    lines.append(" ".join([str(f.owner) for f in ctx.files.deps]))
    ctx.actions.write(output = out, content = "\\n".join(lines) + "\\n")
    return [DefaultInfo(files = depset([out]))]

report = rule(implementation = _report_impl, attrs = {
    "deps": attr.label_list(allow_files = True),
    "tool": attr.label(default = Label("//lib:tool.sh"), allow_single_file = True),
})
"""


def graph(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def content_of(g: ActionGraph, owner: str) -> str:
    (a,) = [a for a in g.actions if str(a.owner) == owner and a.kind == "write"]
    return bytes(a.content).decode()


def test_labels_and_targets_read_as_in_bazel(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "lib/BUILD": "",
            "lib/tool.sh": "",
            "lib/defs.bzl": DEFS,
            "p/a.txt": "",
            "p/BUILD": (
                'load("//lib:defs.bzl", "named", "report")\n'
                'named(name = "n", text = "N", src = "a.txt")\n'
                'report(name = "r", deps = [":n", "a.txt"])\n'
            ),
        }
    )
    text = content_of(graph(root, "//p:r"), "//p:r")
    assert text.splitlines() == [
        "//p:r",
        "//p:r",
        "r p",
        "|",
        "//p:other //x:y",
        "//lib:tool.sh tool.sh",
        "//p:n yes N p/a.txt a.txt",
        "//p:a.txt no - p/a.txt a.txt",
        "rules_x //lib:here",
        "True",
        "//p:a.txt //p:a.txt",
    ]


def test_label_in_a_build_file_is_an_attribute_value(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/a.txt": "",
            "p/BUILD": 'filegroup(name = "f", srcs = [Label("//p:a.txt")])\n',
        }
    )
    g = graph(root, "//p:f")
    assert [f.path for f in g.targets[Label(package="p", name="f")].files] == ["p/a.txt"]


def test_a_rule_named_with_an_underscore_works_directly_and_from_a_macro(
    make_ws: MakeWs,
) -> None:
    root = make_ws(
        {
            "p/defs.bzl": (
                "def _impl(ctx):\n"
                "    out = ctx.actions.declare_file(ctx.attr.out)\n"
                "    ctx.actions.write(output = out, content = ctx.attr.content)\n"
                "    return [DefaultInfo(files = depset([out]))]\n"
                '_file = rule(implementation = _impl, attrs = {"out": attr.string(), "content": attr.string()})\n'
                "def file(**kwargs):\n"
                "    _file(**kwargs)\n"
                "_kind = _file\n"
            ),
            "p/BUILD": 'load(":defs.bzl", "file")\nfile(name = "h", out = "h.txt", content = "hi")\n',
        }
    )
    g = graph(root)
    assert content_of(g, "//p:h") == "hi"
    assert g.targets[Label(package="p", name="h")].kind == "_file"
    assert g.targets[Label(package="p", name="h")].files[0].path == f"{BIN_DIR}/p/h.txt"


def test_manual_targets_are_skipped_by_patterns_and_built_when_named(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/BUILD": (
                'genrule(name = "a", outs = ["a.txt"], cmd = "echo > $@")\n'
                'genrule(name = "m", outs = ["m.txt"], cmd = "echo > $@", tags = ["manual"])\n'
            ),
        }
    )
    for pattern in ("//...", "//p:all", "//p/..."):
        labels, _ = load_and_analyze(root, [pattern])
        assert [str(x) for x in labels] == ["//p:a"], pattern
    labels, g = load_and_analyze(root, ["//p:m"])
    assert [str(x) for x in labels] == ["//p:m"] and len(g.actions) == 1


def test_missing_apis_name_the_api_and_the_bzl_line(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.bzl": (
                "def _impl(ctx):\n"
                "    ctx.fragments.cpp\n"
                "    return []\n"
                "r = rule(implementation = _impl)\n"
                "def _impl2(ctx):\n"
                "    ctx.actions.frobnicate()\n"
                "r2 = rule(implementation = _impl2)\n"
                "def m():\n"
                '    native.no_such_rule(name = "x")\n'
            ),
            "p/BUILD": 'load(":defs.bzl", "r", "r2")\nr(name = "a")\nr2(name = "b")\n',
            "q/BUILD": 'load("//p:defs.bzl", "m")\nm()\n',
        }
    )
    with pytest.raises(BuildError) as e:
        graph(root, "//p:a")
    assert "ctx.fragments: Bazel has this API, but rbs does not support it yet" in e.value.message
    assert str(e.value.location) == "p/defs.bzl:2:5"
    with pytest.raises(BuildError) as e:
        graph(root, "//p:b")
    assert "ctx.actions.frobnicate: no such API" in e.value.message
    assert str(e.value.location).startswith("p/defs.bzl:6")
    with pytest.raises(BuildError) as e:
        graph(root, "//q:all")
    assert "native.no_such_rule" in e.value.message
    assert str(e.value.location).startswith("p/defs.bzl:9")


def test_an_unknown_repository_is_one_error_not_two(make_ws: MakeWs) -> None:
    root = make_ws({"p/BUILD": 'load("@nowhere//x:defs.bzl", "y")\n'})
    with pytest.raises(BuildError) as e:
        graph(root)
    text = e.value.render()
    assert "unknown repository @nowhere" in text and "error: error" not in text
    assert str(e.value.location).startswith("p/BUILD:1")


def test_a_module_bazel_root_loads_bzlmod_rule_sets(tmp_path: Path) -> None:
    (tmp_path / "MODULE.bazel").write_text(
        'module(name = "m")\nbazel_dep(name = "rules_shell", version = "0.2.0")\n'
        'bazel_dep(name = "rules_python", version = "0.31.0")\n'
    )
    (tmp_path / "p").mkdir()
    (tmp_path / "p/run.sh").write_text("echo hi\n")
    (tmp_path / "p/BUILD").write_text(
        'load("@rules_shell//shell:sh_binary.bzl", "sh_binary")\n'
        'load("@rules_python//python:defs.bzl", "py_library")\n'
        'sh_binary(name = "run", srcs = ["run.sh"])\n'
    )
    from rbs.build.workspace import Workspace, find_root

    assert find_root(tmp_path / "p") == tmp_path
    assert Workspace(root=tmp_path).name == "_main"
    g = graph(tmp_path)
    assert g.targets[Label(package="p", name="run")].executable is not None


def test_a_missing_provider_is_named(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.bzl": (
                'MyInfo = provider(fields = ["x"])\n'
                "def _impl(ctx):\n"
                "    return [ctx.attr.dep[MyInfo]]\n"
                'r = rule(implementation = _impl, attrs = {"dep": attr.label()})\n'
            ),
            "p/BUILD": (
                'load(":defs.bzl", "r")\n'
                'genrule(name = "g", outs = ["g.txt"], cmd = "echo > $@")\n'
                'r(name = "a", dep = ":g")\n'
            ),
        }
    )
    with pytest.raises(BuildError) as e:
        graph(root, "//p:a")
    assert "<target //p:g> doesn't contain declared provider 'MyInfo'" in e.value.message
    assert str(e.value.location).startswith("p/defs.bzl:3")


def test_type_names_are_bazels(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/a.txt": "",
            "p/defs.bzl": (
                "def _impl(ctx):\n"
                '    out = ctx.actions.declare_file("t.txt")\n'
                "    d = ctx.attr.dep\n"
                "    names = [type(ctx.label), type(d), type(ctx.file.dep), type(d.files), type([]), type(ctx.attr.how), ctx.attr.how]\n"
                '    ctx.actions.write(output = out, content = " ".join(names))\n'
                "    return [DefaultInfo(files = depset([out]))]\n"
                'r = rule(implementation = _impl, attrs = {"dep": attr.label(allow_single_file = True), "how": attr.string()})\n'
                "def m(name, how):\n"
                '    r(name = name, dep = "a.txt", how = "select" if type(how) == "select" else how)\n'
            ),
            "p/BUILD": 'load(":defs.bzl", "m")\nm(name = "t", how = select({"//conditions:default": "x"}))\n',
        }
    )
    assert (
        content_of(graph(root, "//p:t"), "//p:t") == "Label Target File depset list string select"
    )


def test_skylib_lib_modules_load_from_rbs(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.bzl": (
                'load("@bazel_skylib//lib:paths.bzl", "paths")\n'
                'load("@bazel_skylib//lib:dicts.bzl", "dicts")\n'
                'load("@bazel_skylib//lib:collections.bzl", "collections")\n'
                'load("@bazel_skylib//lib:shell.bzl", "shell")\n'
                'load("@bazel_skylib//lib:types.bzl", "types")\n'
                'load("@bazel_skylib//lib:sets.bzl", "sets")\n'
                "def _impl(ctx):\n"
                '    out = ctx.actions.declare_file("s.txt")\n'
                "    words = [\n"
                '        paths.join("a", "b.txt"), paths.basename("x/y.c"), paths.replace_extension("f.c", ".o"),\n'
                '        str(dicts.add({"a": 1}, {"b": 2})), str(collections.uniq([1, 1, 2])),\n'
                '        shell.quote("it\'s"), str(types.is_list([])), str(types.is_string(ctx.label)),\n'
                "        str(sets.length(sets.make([1, 2, 2]))),\n"
                "    ]\n"
                '    ctx.actions.write(output = out, content = " ".join(words))\n'
                "    return [DefaultInfo(files = depset([out]))]\n"
                "r = rule(implementation = _impl)\n"
            ),
            "p/BUILD": 'load(":defs.bzl", "r")\nr(name = "s")\n',
        }
    )
    assert content_of(graph(root, "//p:s"), "//p:s") == (
        "a/b.txt y.c f.o {\"a\": 1, \"b\": 2} [1, 2] 'it'\\''s' True False 2"
    )


def test_a_missing_bazel_global_is_named_with_its_line(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.bzl": "def _impl(rctx):\n    pass\nfetch = repository_rule(implementation = _impl)\n",
            "p/BUILD": 'load(":defs.bzl", "fetch")\n',
        }
    )
    with pytest.raises(BuildError) as e:
        graph(root)
    assert e.value.message == "repository_rule: Bazel has this API, but rbs does not support it yet"
    assert str(e.value.location).startswith("p/defs.bzl:3")
