"""Analysis of tool configurations: a genrule's tools (and all they depend on) are built
in the host configuration and `cfg = "exec"` attributes in the exec one, each under the
folder Bazel 4.2.3 uses, so `$(execpath tool)` and `File.path` match Bazel's (the
expected paths were read from Bazel 4.2.3's outputs for this very workspace)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rbs.build.api import load_and_analyze
from rbs.build.engine import out_path
from rbs.build.graph import BIN_DIR, EXEC_BIN_DIR, HOST_BIN_DIR, ActionGraph
from rbs.build.labels import Label

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
def _impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    t = ctx.executable.tool
    ctx.actions.write(out, "%s %s %s\\n" % (t.path, t.short_path, t.root.path))
    return [DefaultInfo(files = depset([out]))]

show = rule(implementation = _impl, attrs = {"tool": attr.label(executable = True, cfg = "exec")})
"""

FILES = {
    "pkg/defs.bzl": DEFS,
    "pkg/BUILD": (
        'load(":defs.bzl", "show")\n'
        'genrule(name = "gen", outs = ["gen.txt"], cmd = "echo $(COMPILATION_MODE) $(BINDIR) > $@")\n'
        'genrule(name = "tool", srcs = [":gen.txt"], outs = ["tool.sh"], executable = True,\n'
        "        cmd = \"echo 'cat $(location :gen.txt)' > $@\")\n"
        'genrule(name = "use", outs = ["use.txt"], tools = [":tool"],\n'
        '        cmd = "echo $(execpath :tool) $(location :tool) > $@")\n'
        'show(name = "s", tool = ":tool")\n'
    ),
}


def graph_of(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def cmd_of(g: ActionGraph, output: str) -> str:
    (a,) = [a for a in g.actions if a.outputs == (output,)]
    return a.argv[2] if a.kind == "run" else a.content.decode()


def test_tools_and_their_deps_build_in_the_exec_configuration(make_ws: MakeWs) -> None:
    g = graph_of(make_ws(FILES), "//pkg:use", "//pkg:s")
    host = HOST_BIN_DIR
    assert host == "bazel-out/host/bin" and EXEC_BIN_DIR == "bazel-out/k8-opt-exec-2B5CBBC6/bin"
    assert cmd_of(g, f"{BIN_DIR}/pkg/use.txt").endswith(
        f"echo {host}/pkg/tool.sh {host}/pkg/tool.sh > {BIN_DIR}/pkg/use.txt"
    )
    ex = EXEC_BIN_DIR
    assert cmd_of(g, f"{BIN_DIR}/pkg/s.txt") == f"{ex}/pkg/tool.sh pkg/tool.sh {ex}\n"
    # The tool's own dependency is in the exec configuration too, with its make variables.
    assert cmd_of(g, f"{host}/pkg/tool.sh").endswith(
        f"echo 'cat {host}/pkg/gen.txt' > {host}/pkg/tool.sh"
    )
    assert cmd_of(g, f"{host}/pkg/gen.txt").endswith(f"echo opt {host} > {host}/pkg/gen.txt")


def test_a_target_in_both_configurations_is_two_sets_of_actions(make_ws: MakeWs) -> None:
    g = graph_of(make_ws(FILES), "//pkg:tool", "//pkg:use")
    outs = sorted(o for a in g.actions for o in a.outputs if o.endswith("tool.sh"))
    assert outs == [f"{HOST_BIN_DIR}/pkg/tool.sh", f"{BIN_DIR}/pkg/tool.sh"]
    assert g.targets[Label(package="pkg", name="tool")].files[0].path == f"{BIN_DIR}/pkg/tool.sh"


def test_tool_outputs_appear_under_rbs_out() -> None:
    assert out_path(f"{HOST_BIN_DIR}/pkg/tool.sh") == "rbs-out/host/bin/pkg/tool.sh"
    assert out_path(f"{EXEC_BIN_DIR}/pkg/tool.sh") == "rbs-out/exec/bin/pkg/tool.sh"
    assert out_path(f"{BIN_DIR}/pkg/tool.sh") == "rbs-out/bin/pkg/tool.sh"
