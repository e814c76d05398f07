"""The per-package analysis cache: an edit re-analyses what it reaches, and nothing less."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.driver import BuildOptions, BuildResult, run_build
from rbs.build.select import BuildConfig

MakeWs = Callable[[dict[str, str]], Path]

# Four packages: lib loads //defs:defs.bzl, app depends on lib, other stands alone,
# and sel chooses by a config_setting of package cfg.
FILES = {
    "defs/BUILD": "",
    "defs/defs.bzl": 'WORD = "one"\n',
    "lib/BUILD": (
        'load("//defs:defs.bzl", "WORD")\n'
        'genrule(name = "l1", srcs = ["in.txt"], outs = ["l1.out"], cmd = "cat $< > $@")\n'
        'genrule(name = "l2", srcs = [":l1.out"], outs = ["l2.out"],'
        ' cmd = "cat $< > $@ && echo " + WORD + " >> $@")\n'
    ),
    "lib/in.txt": "lib\n",
    "app/BUILD": (
        'genrule(name = "a1", srcs = ["//lib:l2.out"], outs = ["a1.out"], cmd = "cat $< > $@")\n'
        'genrule(name = "a2", srcs = [":a1.out"], outs = ["a2.out"], cmd = "cat $< $< > $@")\n'
    ),
    "other/BUILD": (
        'genrule(name = "o1", outs = ["o1.out"], cmd = "echo other > $@")\n'
        'genrule(name = "o2", srcs = [":o1.out"], outs = ["o2.out"], cmd = "cp $< $@")\n'
    ),
    "cfg/BUILD": 'config_setting(name = "fast", define_values = {"mode": "fast"})\n',
    "sel/BUILD": (
        'genrule(name = "s", outs = ["s.out"],\n'
        '        cmd = select({"//cfg:fast": "echo fast > $@", "//conditions:default": "echo slow > $@"}))\n'
    ),
}
TOTAL = 8  # rule targets (config_setting included)


def build(root: Path, defines: dict[str, str] | None = None) -> BuildResult:
    config = BuildConfig(defines=tuple((defines or {}).items()))
    return run_build(root, ("//...",), options=BuildOptions(jobs=2, config=config))


def out(root: Path, rel: str) -> str:
    return (root / "rbs-out/bin" / rel).read_text()


def edit(root: Path, rel: str, old: str, new: str) -> None:
    p = root / rel
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))


@pytest.fixture
def root(make_ws: MakeWs) -> Path:
    root = make_ws(FILES)
    r = build(root)
    assert r.ok and (r.analysed, r.restored) == (TOTAL, 0)
    assert out(root, "app/a2.out") == "lib\none\nlib\none\n"
    return root


def test_an_edited_build_file_re_analyses_its_package_and_reverse_dependencies(
    root: Path,
) -> None:
    edit(root, "lib/BUILD", '"cat $< > $@")', '"cat $< $< > $@")')
    r = build(root)
    # lib's two targets and app's two (which depend on lib); other, cfg and sel are kept.
    assert r.ok and not r.analysis_cached and (r.analysed, r.restored) == (4, TOTAL - 4)
    assert out(root, "app/a2.out") == "lib\nlib\none\n" * 2
    assert out(root, "other/o2.out") == "other\n" and out(root, "sel/s.out") == "slow\n"
    assert build(root).up_to_date


def test_an_edit_at_the_top_of_the_graph_re_analyses_only_that_package(root: Path) -> None:
    edit(root, "app/BUILD", '"cat $< $< > $@"', '"cat $< $< $< > $@"')
    r = build(root)
    assert r.ok and (r.analysed, r.restored) == (2, TOTAL - 2)
    assert out(root, "app/a2.out") == "lib\none\n" * 3


def test_an_edited_bzl_file_re_analyses_every_package_that_loads_it(root: Path) -> None:
    (root / "defs/defs.bzl").write_text('WORD = "two"\n')
    r = build(root)
    assert r.ok and (r.analysed, r.restored) == (4, TOTAL - 4)  # lib loads it, app needs lib
    assert out(root, "app/a2.out") == "lib\ntwo\nlib\ntwo\n"


def test_a_changed_config_setting_re_analyses_the_package_that_selects_on_it(
    root: Path,
) -> None:
    fast = {"mode": "fast"}
    r = build(root, defines=fast)  # another configuration: its own tables
    assert r.ok and (r.analysed, r.restored) == (TOTAL, 0) and out(root, "sel/s.out") == "fast\n"
    edit(root, "cfg/BUILD", '"fast"}', '"quick"}')
    r = build(root, defines=fast)
    # cfg changed, and sel's select() read it while sel/BUILD was loaded.
    assert r.ok and (r.analysed, r.restored) == (2, TOTAL - 2)
    assert out(root, "sel/s.out") == "slow\n"


def test_a_changed_source_file_changes_the_action_not_the_analysis(root: Path) -> None:
    (root / "lib/in.txt").write_text("changed\n")
    r = build(root)
    assert r.ok and r.analysis_cached and r.report.executed >= 1
    assert out(root, "app/a2.out") == "changed\none\nchanged\none\n"


def test_a_deleted_source_file_fails_the_targets_that_named_it(root: Path) -> None:
    (root / "lib/in.txt").unlink()
    r = run_build(root, ("//...",), options=BuildOptions(jobs=2, keep_going=True))
    assert not r.ok
    assert any("in.txt" in e.message for e in r.load_errors)


def test_a_new_package_re_analyses_everything(root: Path) -> None:
    (root / "new").mkdir()
    (root / "new/BUILD").write_text('genrule(name = "n", outs = ["n.out"], cmd = "echo n > $@")\n')
    r = build(root)
    assert r.ok and (r.analysed, r.restored) == (TOTAL + 1, 0)
    assert out(root, "new/n.out") == "n\n"


@pytest.mark.parametrize("which", ["index", "package"])
def test_a_corrupt_cache_file_is_ignored(root: Path, which: str) -> None:
    tables = list((root / ".rbs/state").glob("packages-*"))
    assert len(tables) == 1
    files = sorted(tables[0].glob("*.pickle"))
    assert len(files) == 7  # the index and six packages
    edit(root, "other/BUILD", "echo other", "echo another")
    for p in files:  # the index alone (then nothing is read), or every package's file
        if (p.name == "index.pickle") == (which == "index"):
            p.write_bytes(b"\x80\x05not a pickle at all")
    r = build(root)
    assert r.ok and (r.analysed, r.restored) == (TOTAL, 0)
    assert out(root, "other/o2.out") == "another\n"
    edit(root, "other/BUILD", "echo another", "echo other")
    r = build(root)  # the tables written again serve the next build
    assert r.ok and (r.analysed, r.restored) == (2, TOTAL - 2)


def test_one_corrupt_package_file_re_analyses_that_package_and_its_dependents(
    root: Path,
) -> None:
    from rbs.build.driver import package_cache

    cache = package_cache(root, BuildConfig())
    cache._shard_path("lib").write_bytes(b"")
    edit(root, "other/BUILD", "echo other", "echo another")  # so the request cache misses
    r = build(root)
    # lib's two targets, app's two, and other's two (edited).
    assert r.ok and (r.analysed, r.restored) == (6, TOTAL - 6)
    assert out(root, "app/a2.out") == "lib\none\nlib\none\n"


def test_a_narrow_request_keeps_the_rest_for_a_wide_one(root: Path) -> None:
    edit(root, "app/BUILD", '"cat $< > $@")', '"cat $< > $@ && echo a >> $@")')
    r = run_build(root, ("//app:a1",), options=BuildOptions(jobs=2))
    assert r.ok and (r.analysed, r.restored) == (1, 2)  # a1 analysed; l1, l2 restored
    r = build(root)
    # a2 was not part of the narrow request, and a1 changed: a2 is analysed now.
    assert r.ok and (r.analysed, r.restored) == (1, TOTAL - 1)
    assert out(root, "app/a2.out") == "lib\none\na\n" * 2


TOOLCHAIN_DEFS = """
def _tc_impl(ctx):
    return [platform_common.ToolchainInfo(suffix = ctx.attr.suffix)]

word_toolchain = rule(implementation = _tc_impl, attrs = {"suffix": attr.string()})

def _say_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, ctx.attr.text + ctx.toolchains["//tc:word_type"].suffix + "\\n")
    return [DefaultInfo(files = depset([out]))]

say = rule(implementation = _say_impl, toolchains = ["//tc:word_type"],
           attrs = {"text": attr.string()})
"""


def test_an_edited_toolchain_re_analyses_the_targets_that_resolve_one(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "WORKSPACE": 'register_toolchains("//tc:all")\n',
            "tc/defs.bzl": TOOLCHAIN_DEFS,
            "tc/BUILD": (
                'load(":defs.bzl", "word_toolchain")\n'
                'toolchain_type(name = "word_type")\n'
                'word_toolchain(name = "impl", suffix = "!")\n'
                'toolchain(name = "tc", toolchain_type = ":word_type", toolchain = ":impl")\n'
            ),
            "app/BUILD": 'load("//tc:defs.bzl", "say")\nsay(name = "s", text = "hi")\n',
            "plain/BUILD": 'genrule(name = "p", outs = ["p.out"], cmd = "echo p > $@")\n',
        }
    )
    r = run_build(root, ("//app:s", "//plain:p"), options=BuildOptions(jobs=2))
    assert r.ok and out(root, "app/s.txt") == "hi!\n"
    edit(root, "tc/BUILD", 'suffix = "!"', 'suffix = "?"')
    r = run_build(root, ("//app:s", "//plain:p"), options=BuildOptions(jobs=2))
    assert r.ok and out(root, "app/s.txt") == "hi?\n"
    assert r.analysed >= 2 and r.restored == 1  # //plain:p only


ASPECT_DEFS = """
SizesInfo = provider(fields = ["files"])

def _sizes_impl(target, ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".size")
    srcs = ctx.rule.files.srcs
    ctx.actions.run_shell(outputs = [out], inputs = srcs,
        command = "cat %s | wc -c > %s" % (" ".join([f.path for f in srcs]), out.path))
    return [SizesInfo(files = depset([out]))]

sizes = aspect(implementation = _sizes_impl, attr_aspects = ["deps"])

def _report_impl(ctx):
    files = depset(transitive = [d[SizesInfo].files for d in ctx.attr.deps]).to_list()
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.run_shell(outputs = [out], inputs = files,
        command = "cat %s > %s" % (" ".join([f.path for f in files]), out.path))
    return [DefaultInfo(files = depset([out]))]

report = rule(implementation = _report_impl, attrs = {"deps": attr.label_list(aspects = [sizes])})
"""


def test_an_aspect_applies_to_a_dependency_restored_from_the_cache(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "lib/a.sh": "12345",
            "lib/BUILD": 'sh_library(name = "a", srcs = ["a.sh"])\n',
            "rep/defs.bzl": ASPECT_DEFS,
            "rep/BUILD": 'load(":defs.bzl", "report")\nreport(name = "r", deps = ["//lib:a"])\n',
        }
    )
    assert run_build(root, ("//lib:a",), options=BuildOptions(jobs=2)).ok
    r = run_build(root, ("//rep:r",), options=BuildOptions(jobs=2))
    # lib is restored, unloaded; the aspect still sees its target's attributes.
    assert r.ok and r.restored == 1 and out(root, "rep/r.txt").strip() == "5"
    edit(root, "lib/BUILD", '"a.sh"]', '"a.sh"], deps = []')
    r = run_build(root, ("//rep:r",), options=BuildOptions(jobs=2))
    assert r.ok and out(root, "rep/r.txt").strip() == "5"


def test_a_bzl_file_loaded_through_another_invalidates_its_loaders(make_ws: MakeWs) -> None:
    files = {
        **FILES,
        "defs/inner.bzl": 'INNER = "deep"\n',
        "defs/defs.bzl": 'load(":inner.bzl", "INNER")\nWORD = INNER\n',
    }
    root = make_ws(files)
    assert build(root).ok and out(root, "lib/l2.out") == "lib\ndeep\n"
    (root / "defs/inner.bzl").write_text('INNER = "deeper"\n')
    r = build(root)
    assert r.ok and (r.analysed, r.restored) == (4, TOTAL - 4)
    assert out(root, "app/a2.out") == "lib\ndeeper\nlib\ndeeper\n"
