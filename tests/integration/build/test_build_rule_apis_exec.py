"""Execution of the loading-time rule APIs: a computed default picks the tool that runs,
native.existing_rules() shapes a macro's genrule, ctx.features reaches an output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rbs.build.driver import BuildOptions, run_build

MakeWs = Callable[[dict[str, str]], Path]

DEFS = """
_TOOLS = {"upper": "//pkg:upper", "none": None}

def _pick(mode):
    return _TOOLS[mode]

def _impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    if ctx.attr._tool:
        ctx.actions.run(outputs = [out], inputs = [ctx.file.src], executable = ctx.executable._tool,
                        arguments = [ctx.file.src.path, out.path])
    else:
        ctx.actions.run_shell(outputs = [out], inputs = [ctx.file.src],
                              command = "cp %s %s" % (ctx.file.src.path, out.path))
    return [DefaultInfo(files = depset([out]))]

convert = rule(implementation = _impl, attrs = {
    "src": attr.label(allow_single_file = True),
    "mode": attr.string(default = "none"),
    "_tool": attr.label(default = _pick, executable = True, cfg = "exec"),
})

def _features_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, " ".join(ctx.features) + "\\n")
    return [DefaultInfo(files = depset([out]))]

show_features = rule(implementation = _features_impl)

def list_rules(name):
    names = sorted(native.existing_rules().keys())
    native.genrule(name = name, outs = [name + ".txt"], cmd = "echo %s > $@" % " ".join(names))
"""


def test_loading_apis_shape_what_runs(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": DEFS,
            "pkg/in.txt": "hello\n",
            "pkg/upper.sh": '#!/bin/bash\ntr a-z A-Z < "$1" > "$2"\n',
            "pkg/BUILD": (
                'load(":defs.bzl", "convert", "show_features", "list_rules")\n'
                'package(features = ["fast", "small"])\n'
                'sh_binary(name = "upper", srcs = ["upper.sh"])\n'
                'convert(name = "up", src = "in.txt", mode = "upper")\n'
                'convert(name = "same", src = "in.txt")\n'
                'show_features(name = "f", features = ["-small", "extra"])\n'
                'list_rules(name = "rules")\n'
            ),
        }
    )
    (root / "pkg/upper.sh").chmod(0o755)
    res = run_build(root, ["//pkg:all"], options=BuildOptions(jobs=2))
    assert res.ok, [f.message for f in res.report.failures]
    out = root / "rbs-out/bin/pkg"
    assert (out / "up.txt").read_text() == "HELLO\n"
    assert (out / "same.txt").read_text() == "hello\n"
    assert (out / "f.txt").read_text() == "extra fast\n"
    assert (out / "rules.txt").read_text() == "f same up upper\n"
