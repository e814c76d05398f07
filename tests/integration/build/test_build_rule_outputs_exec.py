"""Execution of Bazel's output APIs: predeclared outputs, executables and their modes,
expand_template, runfiles symlinks, output groups, the bash runfiles library."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from rbs.build.driver import BuildOptions, BuildResult, run_build
from rbs.build.output_groups import parse_output_groups

MakeWs = Callable[[dict[str, str]], Path]


def build(root: Path, *patterns: str, mode: str = "build", groups: str = "") -> BuildResult:
    opts = BuildOptions(jobs=2, output_groups=parse_output_groups([groups] if groups else []))
    res = run_build(root, patterns or ("//...",), options=opts, mode=mode)
    return res


def out(root: Path, rel: str) -> Path:
    return root / "rbs-out/bin" / rel


RULES = """
def _hashes(ctx):
    for f in ctx.outputs.hashes:
        word = f.basename[:-len(".md5")]
        ctx.actions.run_shell(outputs = [f], inputs = [ctx.file.dictionary],
            command = "grep %s %s | md5sum | cut -f1 -d ' ' > %s" % (word, ctx.file.dictionary.path, f.path))
    ctx.actions.write(ctx.outputs.manifest, "".join([f.short_path + "\\n" for f in sorted(ctx.outputs.hashes)]))

word_hashes = rule(implementation = _hashes, outputs = {"manifest": "%{name}.manifest"},
    attrs = {"dictionary": attr.label(allow_single_file = True), "hashes": attr.output_list()})

def _greet(ctx):
    ctx.actions.expand_template(template = ctx.file.template, output = ctx.outputs.executable,
        substitutions = {"{WHO}": ctx.attr.who, "{DATA}": ctx.file.data.short_path})
    return [DefaultInfo(runfiles = ctx.runfiles(files = [ctx.file.data],
        root_symlinks = {"top/data.txt": ctx.file.data}))]

greet_test = rule(implementation = _greet, test = True, attrs = {
    "template": attr.label(allow_single_file = True), "who": attr.string(),
    "data": attr.label(allow_single_file = True)})

def _grouped(ctx):
    a = ctx.actions.declare_file(ctx.label.name + ".a")
    b = ctx.actions.declare_file(ctx.label.name + ".b")
    ctx.actions.write(a, "A")
    ctx.actions.write(b, "B")
    return [DefaultInfo(files = depset([a])), OutputGroupInfo(extra = depset([b]))]

grouped = rule(implementation = _grouped)

BASH_RLOCATION = '''#!/bin/bash
set -uo pipefail; f=bazel_tools/tools/bash/runfiles/runfiles.bash
source "${RUNFILES_DIR:-/dev/null}/$f" 2>/dev/null || source "$0.runfiles/$f" 2>/dev/null || { echo >&2 "no $f"; exit 1; }; set -e
'''

def _tool(ctx):
    ctx.actions.write(ctx.outputs.executable,
        BASH_RLOCATION + "cat $(rlocation %s/%s) $0.runfiles/alias.txt > $1\\n" % (ctx.workspace_name, ctx.file._data.short_path))
    runfiles = ctx.runfiles(files = [ctx.file._data], root_symlinks = {"alias.txt": ctx.file._data})
    return [DefaultInfo(runfiles = runfiles.merge(ctx.attr._lib[DefaultInfo].default_runfiles))]

tool = rule(implementation = _tool, executable = True, attrs = {
    "_data": attr.label(allow_single_file = True, default = ":data.txt"),
    "_lib": attr.label(default = "@bazel_tools//tools/bash/runfiles")})

def _use(ctx):
    o = ctx.actions.declare_file(ctx.label.name + ".out")
    ctx.actions.run(outputs = [o], executable = ctx.executable.tool, arguments = [o.path])
    return [DefaultInfo(files = depset([o]))]

tool_user = rule(implementation = _use, attrs = {"tool": attr.label(executable = True, cfg = "exec")})
"""

FILES = {
    "pkg/rules.bzl": RULES,
    "pkg/animals.dict": "dog\ncat\n",
    "pkg/greet.tpl": '#!/bin/bash\necho "Hello {WHO}"; cat {DATA} ../top/data.txt\n',
    "pkg/data.txt": "data\n",
    "pkg/BUILD": (
        'load(":rules.bzl", "word_hashes", "greet_test", "grouped", "tool", "tool_user")\n'
        'word_hashes(name = "h", dictionary = "animals.dict", hashes = [":dog.md5", "cat.md5"])\n'
        'genrule(name = "both", srcs = [":dog.md5", ":h.manifest"], outs = ["both.txt"], cmd = "cat $(SRCS) > $@")\n'
        'greet_test(name = "greet", template = "greet.tpl", who = "Ada", data = "data.txt")\n'
        'grouped(name = "g")\n'
        'tool(name = "t")\n'
        'tool_user(name = "u", tool = ":t")\n'
    ),
}


def test_predeclared_outputs_build_by_label(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    assert build(root, "//pkg:both").ok
    import hashlib

    dog = hashlib.md5(b"dog\n").hexdigest() + "\n"
    assert out(root, "pkg/dog.md5").read_text() == dog
    assert out(root, "pkg/both.txt").read_text() == dog + "pkg/cat.md5\npkg/dog.md5\n"
    assert not list((root / "rbs-out/bin/pkg").glob(":*"))
    assert out(root, "pkg/dog.md5").stat().st_mode & 0o777 == 0o444


def test_template_test_runs_with_root_symlinks(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    res = build(root, "//pkg:greet", mode="test")
    assert res.ok
    ((code, _cached, log),) = res.report.tests.values()
    assert code == 0, log
    assert b"Hello Ada\ndata\ndata\n" in log
    exe = out(root, "pkg/greet")
    assert exe.stat().st_mode & 0o777 == 0o555
    # `rbs run` sees the same tree: the root symlink sits beside the workspace folder.
    assert (root / "rbs-out/bin/pkg/greet.runfiles/top/data.txt").read_text() == "data\n"


def test_output_groups_choose_what_is_built(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    assert build(root, "//pkg:g", groups="extra").ok
    assert out(root, "pkg/g.b").read_text() == "B" and not out(root, "pkg/g.a").exists()
    assert build(root, "//pkg:g", groups="+extra").ok
    assert out(root, "pkg/g.a").read_text() == "A"


def test_tool_with_bash_runfiles_library(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    res = build(root, "//pkg:u")
    assert res.ok, [f.message for f in res.report.failures]
    assert out(root, "pkg/u.out").read_text() == "data\ndata\n"
    # The same library works when the tool runs outside a build, from its runfiles tree.
    assert build(root, "//pkg:t").ok
    target = root / "x.txt"
    subprocess.run([str(out(root, "pkg/t")), str(target)], check=True, timeout=60)
    assert target.read_text() == "data\ndata\n"


def test_output_groups_flag_on_the_command_line(make_ws: MakeWs) -> None:
    import os
    import sys

    root = make_ws(FILES)
    rbs = Path(sys.executable).with_name("rbs")
    res = subprocess.run(
        [str(rbs), "build", "--plain", "--output_groups=extra", "//pkg:g"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert res.returncode == 0, res.stderr
    assert "rbs-out/bin/pkg/g.b" in res.stderr and "g.a" not in res.stderr
    bad = subprocess.run(
        [str(rbs), "build", "--output_groups=a,+b", "//pkg:g"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "--output_groups" in bad.stderr and "Traceback" not in bad.stderr
