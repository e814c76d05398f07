"""Execution: select() branches, Label/Target values and --keep-going past loading errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rbs.build.driver import BuildOptions, BuildResult, run_build
from rbs.build.select import BuildConfig

MakeWs = Callable[[dict[str, str]], Path]

FILES = {
    "conf/BUILD": (
        'config_setting(name = "fast", define_values = {"mode": "fast"})\n'
        'config_setting(name = "linux", constraint_values = ["@platforms//os:linux"])\n'
    ),
    "p/a.txt": "alpha\n",
    "p/b.txt": "beta\n",
    "p/defs.bzl": (
        "def _impl(ctx):\n"
        '    out = ctx.actions.declare_file(ctx.label.name + ".txt")\n'
        "    names = [str(d.label) + '=' + ','.join([f.basename for f in d.files.to_list()]) for d in ctx.attr.deps]\n"
        "    ctx.actions.write(output = out, content = '%s %s\\n' % (ctx.label, ' '.join(names)))\n"
        "    return [DefaultInfo(files = depset([out]))]\n"
        '_report = rule(implementation = _impl, attrs = {"deps": attr.label_list(allow_files = True)})\n'
        "def report(name, deps = []):\n"
        '    _report(name = name, deps = deps + select({"//conf:fast": [":b.txt"], "//conditions:default": []}))\n'
    ),
    "p/BUILD": (
        'load(":defs.bzl", "report")\n'
        'genrule(name = "g", srcs = ["a.txt"] + select({"//conf:fast": ["b.txt"], "//conditions:default": []}),\n'
        '    outs = ["g.out"], cmd = "cat $(SRCS) > $@; echo " + select({"//conf:linux": "linux", "//conditions:default": "other"}) + " >> $@")\n'
        'report(name = "r", deps = [":a.txt"])\n'
        'genrule(name = "m", outs = ["m.out"], cmd = "echo m > $@", tags = ["manual"])\n'
    ),
}


def build(
    root: Path, *patterns: str, keep_going: bool = False, defines: dict[str, str] | None = None
) -> BuildResult:
    opts = BuildOptions(
        jobs=2, keep_going=keep_going, config=BuildConfig(defines=tuple((defines or {}).items()))
    )
    return run_build(root, patterns or ("//...",), options=opts)


def out(root: Path, rel: str) -> str:
    return (root / "rbs-out/bin" / rel).read_text()


def test_defines_switch_the_outputs_and_the_cache_keeps_both(make_ws: MakeWs) -> None:
    root = make_ws(FILES)
    r = build(root)
    assert r.ok
    assert out(root, "p/g.out") == "alpha\nlinux\n"
    assert out(root, "p/r.txt") == "//p:r //p:a.txt=a.txt\n"
    assert not (root / "rbs-out/bin/p/m.out").exists()  # manual: not part of //...
    r = build(root, defines={"mode": "fast"})
    assert r.ok
    assert out(root, "p/g.out") == "alpha\nbeta\nlinux\n"
    assert out(root, "p/r.txt") == "//p:r //p:a.txt=a.txt //p:b.txt=b.txt\n"
    back = build(root)
    assert out(root, "p/g.out") == "alpha\nlinux\n"
    assert back.report.cache_hits >= 1
    assert build(root, "//p:m").ok
    assert out(root, "p/m.out") == "m\n"


def test_keep_going_builds_other_packages_past_a_loading_error(make_ws: MakeWs) -> None:
    root = make_ws({**FILES, "bad/BUILD": 'genrule(name = "x", outs = ["x"], cmd = nope)\n'})
    r = build(root, keep_going=True)
    assert not r.ok
    (err,) = r.load_errors
    assert str(err.location).startswith("bad/BUILD:1") and "nope" in err.message
    assert out(root, "p/g.out") == "alpha\nlinux\n"
