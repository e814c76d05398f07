"""Analysis of Bazel's output APIs: predeclared outputs, executables, expand_template,
runfiles symlinks, output groups, @bazel_tools' bash runfiles, cc_* stubs (nothing runs)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import BIN_DIR, ActionGraph, ActionSpec
from rbs.build.labels import Label
from rbs.build.output_groups import group_files, parse_output_groups

MakeWs = Callable[[dict[str, str]], Path]


def graph_of(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def actions_of(g: ActionGraph, owner: str) -> list[ActionSpec]:
    return [a for a in g.actions if str(a.owner) == owner and not a.is_test]


HASH_RULE = """
def _impl(ctx):
    for out in [ctx.outputs.md5, ctx.outputs.sha] + ctx.outputs.hashes:
        ctx.actions.run_shell(outputs = [out], inputs = [ctx.file.src],
                              command = "md5sum %s > %s" % (ctx.file.src.path, out.path))
    manifest = "".join([f.path + "\\n" for f in sorted(ctx.outputs.hashes)])
    ctx.actions.write(ctx.outputs.manifest, manifest)

hashes = rule(
    implementation = _impl,
    outputs = {"md5": "%{name}.md5", "sha": "%{src}.sha"},
    attrs = {
        "src": attr.label(allow_single_file = True),
        "hashes": attr.output_list(),
        "manifest": attr.output(),
    },
)
"""


def test_predeclared_outputs_are_files_with_labels(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/in.txt": "x",
            "pkg/defs.bzl": HASH_RULE,
            "pkg/BUILD": (
                'load(":defs.bzl", "hashes")\n'
                'hashes(name = "h", src = "in.txt", hashes = [":zeta.md5", "alpha.md5"],\n'
                '       manifest = ":h.manifest")\n'
                'genrule(name = "use", srcs = [":h.md5", ":in.txt.sha", ":zeta.md5"], outs = ["u"],\n'
                '        cmd = "cat $(SRCS) > $@")\n'
            ),
        }
    )
    g = graph_of(root)
    outs = {o for a in actions_of(g, "//pkg:h") for o in a.outputs}
    names = {o.rpartition("/")[2] for o in outs}
    # Never a file literally named ":zeta.md5".
    assert names == {"h.md5", "in.txt.sha", "zeta.md5", "alpha.md5", "h.manifest"}
    # With no DefaultInfo, the default outputs are the predeclared ones.
    files = {f.short_path for f in g.targets[Label(package="pkg", name="h")].files}
    assert files == {f"pkg/{n}" for n in names}
    # sorted() on Files orders by path, as Bazel does.
    (write,) = [a for a in actions_of(g, "//pkg:h") if a.kind == "write"]
    assert write.content.decode() == f"{BIN_DIR}/pkg/alpha.md5\n{BIN_DIR}/pkg/zeta.md5\n"
    (use,) = actions_of(g, "//pkg:use")
    assert f"{BIN_DIR}/pkg/h.md5" in use.inputs and f"{BIN_DIR}/pkg/zeta.md5" in use.inputs


def test_output_attribute_outside_the_package_is_refused(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": HASH_RULE,
            "pkg/BUILD": 'load(":defs.bzl", "hashes")\nhashes(name = "h", manifest = "//other:m")\n',
        }
    )
    with pytest.raises(BuildError, match="must be in the target's own package //pkg"):
        graph_of(root)


def test_outputs_function_fails_with_the_api_name(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": "def _o(name):\n    return {}\nr = rule(implementation = len, outputs = _o)\n",
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x")\n',
        }
    )
    with pytest.raises(BuildError, match=r"rule\(outputs = <function>\) is not supported") as e:
        graph_of(root)
    assert e.value.location is not None and e.value.location.file == "pkg/defs.bzl"


EXE_RULES = """
def _script(ctx):
    # ctx.outputs.executable written without is_executable: still the executable.
    ctx.actions.write(ctx.outputs.executable, "echo hi\\n")
    return [DefaultInfo(runfiles = ctx.runfiles(files = ctx.files.data))]

script_test = rule(implementation = _script, test = True,
                   attrs = {"data": attr.label_list(allow_files = True)})

def _other(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(out, "true\\n", is_executable = True)
    return [DefaultInfo(executable = out)]

other_binary = rule(implementation = _other, executable = True)
"""


def test_executable_rules_get_ctx_outputs_executable(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/d.txt": "d",
            "pkg/defs.bzl": EXE_RULES,
            "pkg/BUILD": (
                'load(":defs.bzl", "script_test", "other_binary")\n'
                'script_test(name = "t", data = ["d.txt"])\nother_binary(name = "b")\n'
            ),
        }
    )
    g = graph_of(root)
    t = g.targets[Label(package="pkg", name="t")]
    assert t.executable is not None and t.executable.path == f"{BIN_DIR}/pkg/t"
    assert t.executable in t.files and t.executable in t.runfiles
    (write,) = actions_of(g, "//pkg:t")
    assert write.executable_outputs == (f"{BIN_DIR}/pkg/t",)
    (test,) = [a for a in g.actions if a.is_test]
    assert test.argv[-1] == "./pkg/t"
    # A rule that returns its own executable does not need ctx.outputs.executable.
    b = g.targets[Label(package="pkg", name="b")]
    assert b.executable is not None and b.executable.short_path == "pkg/b.sh"
    assert [f.short_path for f in b.files] == ["pkg/b.sh"]


def test_expand_template_is_one_action_on_the_template(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/hello.tpl": "Hello {NAME}!\n",
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                "    ctx.actions.expand_template(template = ctx.file.template, output = ctx.outputs.out,\n"
                '        substitutions = {"{NAME}": ctx.attr.who}, is_executable = True)\n'
                "r = rule(implementation = _impl, attrs = {\n"
                '    "template": attr.label(allow_single_file = True), "who": attr.string(),\n'
                '    "out": attr.output()})\n'
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x", template = "hello.tpl", who = "Ada", out = "x.txt")\n',
        }
    )
    (a,) = actions_of(graph_of(root), "//pkg:x")
    assert a.kind == "template" and a.mnemonic == "TemplateExpand"
    assert a.inputs == ("pkg/hello.tpl",) and a.outputs == (f"{BIN_DIR}/pkg/x.txt",)
    assert json.loads(a.content) == [["{NAME}", "Ada"]]
    assert a.executable_outputs == a.outputs


def test_expand_template_computed_substitutions_fail_by_name(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/t": "",
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                "    ctx.actions.expand_template(template = ctx.file.t, output = ctx.outputs.o,\n"
                "        computed_substitutions = 1)\n"
                'r = rule(implementation = _impl, attrs = {"t": attr.label(allow_single_file = True), "o": attr.output()})\n'
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x", t = "t", o = "o")\n',
        }
    )
    with pytest.raises(BuildError, match=r"computed_substitutions = \.\.\.\) is not supported"):
        graph_of(root)


RUNFILES_RULES = """
def _tool(ctx):
    ctx.actions.write(ctx.outputs.executable, "cat $0.runfiles/data_dep > $1\\n")
    return [DefaultInfo(runfiles = ctx.runfiles(
        root_symlinks = {"data_dep": ctx.file._data},
        symlinks = {"renamed/d.txt": ctx.file._data},
    ))]

tool = rule(implementation = _tool, executable = True,
            attrs = {"_data": attr.label(allow_single_file = True, default = ":d.txt")})

def _user(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".out")
    ctx.actions.run(outputs = [out], executable = ctx.executable.tool, arguments = [out.path])
    return [DefaultInfo(files = depset([out]))]

tool_user = rule(implementation = _user,
                 attrs = {"tool": attr.label(executable = True, cfg = "exec")})
"""


def test_runfiles_symlinks_reach_the_tree_and_tool_inputs(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/d.txt": "d",
            "pkg/defs.bzl": RUNFILES_RULES,
            "pkg/BUILD": 'load(":defs.bzl", "tool", "tool_user")\ntool(name = "t")\ntool_user(name = "u", tool = ":t")\n',
        }
    )
    g = graph_of(root)
    t = g.targets[Label(package="pkg", name="t")]
    links = {path: f.path for path, f in t.runfiles_links}
    assert links == {"data_dep": "pkg/d.txt", "__main__/renamed/d.txt": "pkg/d.txt"}
    (run,) = actions_of(g, "//pkg:u")
    # The tool (cfg = "exec") runs from the exec configuration's folder, as in Bazel 4.2.3.
    host = "bazel-out/k8-opt-exec-2B5CBBC6/bin"
    assert run.argv[0] == f"{host}/pkg/t"
    assert (f"{host}/pkg/t.runfiles/data_dep", "pkg/d.txt") in run.links
    assert (f"{host}/pkg/t.runfiles/__main__/renamed/d.txt", "pkg/d.txt") in run.links
    assert "pkg/d.txt" in run.inputs


def test_runfiles_symlinks_must_map_to_files(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                '    ctx.runfiles(root_symlinks = {"x": "not a file"})\n'
                "r = rule(implementation = _impl)\n"
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x")\n',
        }
    )
    with pytest.raises(BuildError, match=r'root_symlinks = \.\.\.\): "x" must map to a File'):
        graph_of(root)


def test_output_groups_select_files(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                "    a = ctx.actions.declare_file('a')\n"
                "    b = ctx.actions.declare_file('b')\n"
                "    for f in (a, b):\n"
                "        ctx.actions.write(f, f.basename)\n"
                "    return [DefaultInfo(files = depset([a])), OutputGroupInfo(extra = depset([b]))]\n"
                "r = rule(implementation = _impl)\n"
                "def _use(ctx):\n"
                "    out = ctx.actions.declare_file('n')\n"
                "    ctx.actions.write(out, str(len(ctx.attr.dep[OutputGroupInfo].extra.to_list())))\n"
                "    return [DefaultInfo(files = depset([out]))]\n"
                "use = rule(implementation = _use, attrs = {'dep': attr.label()})\n"
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r", "use")\nr(name = "x")\nuse(name = "u", dep = ":x")\n',
        }
    )
    g = graph_of(root)
    x = g.targets[Label(package="pkg", name="x")]
    assert [f.short_path for f in group_files(x, ("extra",))] == ["pkg/b"]
    assert [f.short_path for f in group_files(x, parse_output_groups(["+extra"]))] == [
        "pkg/a",
        "pkg/b",
    ]
    assert group_files(x, ("missing",)) == []
    (w,) = actions_of(g, "//pkg:u")
    assert w.content == b"1"


def test_output_groups_flag_syntax() -> None:
    assert parse_output_groups(["a,b", "c"]) == ("a", "b", "c")
    assert parse_output_groups(["+x,-default"]) == ("x",)
    with pytest.raises(ValueError, match="mix of plain names"):
        parse_output_groups(["a,+b"])


def test_bash_runfiles_library_is_provided(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _impl(ctx):\n"
                "    ctx.actions.write(ctx.outputs.executable, 'x')\n"
                "    return [DefaultInfo(runfiles = ctx.attr._lib[DefaultInfo].default_runfiles)]\n"
                "r = rule(implementation = _impl, executable = True,\n"
                "         attrs = {'_lib': attr.label(default = '@bazel_tools//tools/bash/runfiles')})\n"
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x")\n',
        }
    )
    g = graph_of(root)
    x = g.targets[Label(package="pkg", name="x")]
    ((path, f),) = x.runfiles_links
    assert path == "bazel_tools/tools/bash/runfiles/runfiles.bash"
    (w,) = [a for a in g.actions if a.outputs == (f.path,)]
    assert b"function rlocation()" in w.content


def test_cc_rules_load_and_fail_at_analysis_by_name(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/app.cc": "int main() {}\n",
            "pkg/BUILD": (
                'load("@rules_cc//cc:defs.bzl", "cc_binary")\n'
                'cc_binary(name = "app", srcs = ["app.cc"])\n'
                'genrule(name = "g", outs = ["g.txt"], cmd = "echo > $@")\n'
            ),
        }
    )
    assert graph_of(root, "//pkg:g").actions
    with pytest.raises(BuildError, match="cc_binary is not supported by rbs") as e:
        graph_of(root, "//pkg:app")
    assert "in cc_binary //pkg:app (defined at pkg/BUILD:2:1)" in str(e.value)
