"""select() and config_setting: which branch the action graph gets (nothing is run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import BIN_DIR, ActionGraph
from rbs.build.select import BuildConfig, host_constraints

MakeWs = Callable[[dict[str, str]], Path]

CONDS = (
    'config_setting(name = "fast", define_values = {"mode": "fast"})\n'
    'config_setting(name = "fast_x", define_values = {"mode": "fast", "x": "1"})\n'
    'config_setting(name = "dbg", values = {"define": "dbg=yes"})\n'
    'config_setting(name = "linux", constraint_values = ["@platforms//os:linux"])\n'
    'config_setting(name = "windows", constraint_values = ["@platforms//os:windows"])\n'
    'config_setting(name = "fastbuild", values = {"compilation_mode": "fastbuild"})\n'
)


def cmd_of(root: Path, target: str, **defines: str) -> str:
    cfg = BuildConfig(defines=tuple(defines.items()))
    _, g = load_and_analyze(root, [target], config=cfg)
    (a,) = [a for a in g.actions if str(a.owner) == target]
    return str(a.argv[2]).removeprefix("set -euo pipefail; ")


def genrule(name: str, cmd: str) -> str:
    return f'genrule(name = "{name}", outs = ["{name}.txt"], cmd = {cmd})\n'


def test_define_values_choose_the_branch_and_default_otherwise(make_ws: MakeWs) -> None:
    sel = 'select({":fast": "echo fast > $@", "//conditions:default": "echo slow > $@"})'
    root = make_ws({"c/BUILD": genrule("g", sel) + CONDS})
    out = f"{BIN_DIR}/c/g.txt"
    assert cmd_of(root, "//c:g") == f"echo slow > {out}"
    assert cmd_of(root, "//c:g", mode="fast") == f"echo fast > {out}"
    assert cmd_of(root, "//c:g", mode="other") == f"echo slow > {out}"


def test_the_more_specialized_condition_wins_and_ties_are_ambiguous(make_ws: MakeWs) -> None:
    sel = 'select({":fast": "echo a > $@", ":fast_x": "echo b > $@"})'
    amb = 'select({":fast": "echo a > $@", ":dbg": "echo c > $@"})'
    root = make_ws({"c/BUILD": CONDS + genrule("g", sel) + genrule("h", amb)})
    assert cmd_of(root, "//c:g", mode="fast").startswith("echo a")
    assert cmd_of(root, "//c:g", mode="fast", x="1").startswith("echo b")
    with pytest.raises(BuildError, match="ambiguous match") as e:
        cmd_of(root, "//c:h", mode="fast", dbg="yes")
    assert str(e.value.location).startswith("c/BUILD:8")
    assert cmd_of(root, "//c:h", dbg="yes").startswith("echo c")


def test_constraint_values_match_the_host_platform(make_ws: MakeWs) -> None:
    assert "@platforms//os:linux" in host_constraints()
    sel = 'select({":windows": "echo w > $@", ":linux": "echo l > $@"})'
    direct = 'select({"@platforms//os:linux": "echo L > $@", "//conditions:default": "x"})'
    root = make_ws({"c/BUILD": CONDS + genrule("g", sel) + genrule("h", direct)})
    assert cmd_of(root, "//c:g").startswith("echo l")
    assert cmd_of(root, "//c:h").startswith("echo L")


def test_select_plus_select_plus_list_and_conditions_in_other_packages(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "conf/BUILD": CONDS,
            "p/a.txt": "a",
            "p/b.txt": "b",
            "p/c.txt": "c",
            "p/BUILD": (
                'genrule(name = "g", outs = ["g.txt"], cmd = "cat $(SRCS) > $@",\n'
                '    srcs = ["a.txt"] + select({"//conf:fast": ["b.txt"], "//conditions:default": []})\n'
                '         + select({"//conf:fastbuild": ["c.txt"]}))\n'
            ),
        }
    )
    _, g = load_and_analyze(root, ["//p:g"], config=BuildConfig(defines=(("mode", "fast"),)))
    (a,) = [a for a in g.actions if str(a.owner) == "//p:g"]
    assert a.inputs == ("p/a.txt", "p/b.txt", "p/c.txt")
    _, g = load_and_analyze(root, ["//p:g"])
    (a,) = [a for a in g.actions if str(a.owner) == "//p:g"]
    assert a.inputs == ("p/a.txt", "p/c.txt")


def test_select_in_a_macro_with_a_label_key_and_a_later_config_setting(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.bzl": (
                "def pick(name):\n"
                '    cmd = select({Label("//p:fast"): "echo F", "//conditions:default": "echo S"})\n'
                '    native.genrule(name = name, outs = [name + ".txt"], cmd = cmd + " > $@")\n'
            ),
            "p/BUILD": 'load(":defs.bzl", "pick")\npick(name = "m")\n' + CONDS,
        }
    )
    assert cmd_of(root, "//p:m", mode="fast") == f"echo F > {BIN_DIR}/p/m.txt"
    assert cmd_of(root, "//p:m") == f"echo S > {BIN_DIR}/p/m.txt"


def test_no_match_error_and_unknown_values_key_and_missing_condition(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "c/BUILD": CONDS
            + genrule("g", 'select({":fast": "x"}, no_match_error = "set --define mode=fast")')
            + genrule("h", 'select({":nope": "x"})')
            + 'config_setting(name = "odd", values = {"stamp": "1"})\n'
            + genrule("i", 'select({":odd": "x", "//conditions:default": "y"})'),
        }
    )
    with pytest.raises(BuildError, match="set --define mode=fast") as e:
        cmd_of(root, "//c:g")
    assert str(e.value.location).startswith("c/BUILD:7")
    with pytest.raises(BuildError, match="no config_setting //c:nope"):
        cmd_of(root, "//c:h")
    with pytest.raises(BuildError, match="values key 'stamp' is not a flag rbs knows"):
        cmd_of(root, "//c:i")


def test_a_select_key_that_is_not_a_config_setting_is_refused(make_ws: MakeWs) -> None:
    root = make_ws({"c/BUILD": genrule("g", 'select({":g2": "x"})') + genrule("g2", '"y"')})
    with pytest.raises(BuildError, match="//c:g2 is a genrule, not a config_setting"):
        cmd_of(root, "//c:g")


def test_config_settings_make_no_actions(make_ws: MakeWs) -> None:
    # The whole-workspace pattern analyses config_settings as targets without actions.
    root = make_ws({"c/BUILD": CONDS})
    g: ActionGraph = load_and_analyze(root, ["//..."])[1]
    assert g.actions == ()


SETTINGS = {
    "s/BUILD": (
        'load("@bazel_skylib//rules:common_settings.bzl", "bool_flag", "string_flag")\n'
        'load("@bazel_skylib//lib:selects.bzl", "selects")\n'
        'string_flag(name = "color", build_setting_default = "red", values = ["red", "blue"])\n'
        'bool_flag(name = "loud", build_setting_default = False)\n'
        'config_setting(name = "blue", flag_values = {":color": "blue"})\n'
        'config_setting(name = "is_loud", flag_values = {":loud": "true"})\n'
        'config_setting(name = "fast", define_values = {"mode": "fast"})\n'
        'selects.config_setting_group(name = "blue_or_fast", match_any = [":blue", ":fast"])\n'
        'selects.config_setting_group(name = "blue_and_loud", match_all = [":blue", ":is_loud"])\n'
        'genrule(name = "g", outs = ["g.txt"], cmd = select({":blue_and_loud": "echo BL > $@",\n'
        '    ":blue_or_fast": "echo BF > $@", "//conditions:default": "echo D > $@"}))\n'
        'genrule(name = "h", outs = ["h.txt"], cmd = selects.with_or({(":blue", ":fast"): "echo or > $@",\n'
        '    "//conditions:default": "echo no > $@"}))\n'
        'load(":show.bzl", "show")\n'
        'show(name = "v", dep = ":color")\n'
    ),
    "s/show.bzl": (
        'load("@bazel_skylib//rules:common_settings.bzl", "BuildSettingInfo")\n'
        "def _impl(ctx):\n"
        '    out = ctx.actions.declare_file(ctx.label.name + ".txt")\n'
        "    ctx.actions.write(output = out, content = ctx.attr.dep[BuildSettingInfo].value)\n"
        "    return [DefaultInfo(files = depset([out]))]\n"
        'show = rule(implementation = _impl, attrs = {"dep": attr.label()})\n'
    ),
}


def test_skylib_flags_flag_values_and_setting_groups(make_ws: MakeWs) -> None:
    root = make_ws(SETTINGS)

    def run(target: str, *flags: tuple[str, str], **defines: str) -> tuple[str, str]:
        cfg = BuildConfig(defines=tuple(defines.items()), flags=flags)
        _, g = load_and_analyze(root, [target], config=cfg)
        (a,) = [a for a in g.actions if str(a.owner) == target]
        return a.kind, (bytes(a.content).decode() if a.kind == "write" else str(a.argv[2]))

    assert run("//s:g")[1].endswith("echo D > " + f"{BIN_DIR}/s/g.txt")
    assert "echo BF" in run("//s:g", mode="fast")[1]
    assert "echo BF" in run("//s:g", ("//s:color", "blue"))[1]
    assert "echo BL" in run("//s:g", ("//s:color", "blue"), ("//s:loud", "True"))[1]
    assert "echo or" in run("//s:h", mode="fast")[1] and "echo no" in run("//s:h")[1]
    assert run("//s:v") == ("write", "red")
    assert run("//s:v", ("//s:color", "blue")) == ("write", "blue")
    with pytest.raises(BuildError, match='"green" is not one of the allowed values'):
        run("//s:v", ("//s:color", "green"))


def test_existing_rules_sees_a_target_with_a_select(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "p/defs.bzl": (
                "def count(name):\n"
                "    n = len(native.existing_rules())\n"
                '    kind = native.existing_rule("g")["kind"]\n'
                '    native.genrule(name = name, outs = [name + ".txt"], cmd = "echo %d %s > $@" % (n, kind))\n'
            ),
            "p/BUILD": (
                'load(":defs.bzl", "count")\n'
                + genrule("g", 'select({"//conditions:default": "echo > $@"})')
                + 'count(name = "c")\n'
            ),
        }
    )
    assert cmd_of(root, "//p:c") == f"echo 1 genrule > {BIN_DIR}/p/c.txt"
