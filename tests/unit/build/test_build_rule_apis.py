"""Analysis of rule APIs read while loading: computed defaults, ctx.features,
native.existing_rules() (the action graph only; nothing runs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import ActionGraph, ActionSpec

MakeWs = Callable[[dict[str, str]], Path]


def graph_of(root: Path, *patterns: str) -> ActionGraph:
    return load_and_analyze(root, patterns or ("//...",))[1]


def writes(g: ActionGraph) -> dict[str, str]:
    """Owner label -> content of its one write action."""
    out: dict[str, str] = {}
    for a in g.actions:
        if isinstance(a, ActionSpec) and a.kind == "write":
            out[str(a.owner)] = a.content.decode()
    return out


COMPUTED = """
_filters = {"comments": "//pkg:strip_comments", "none": None}

def _get_filter(filter, name):
    return _filters[filter]

def _impl(ctx):
    tools = ctx.files._filter_bin
    ctx.actions.write(ctx.outputs.out, "%s %s" % (ctx.attr.filter, tools[0].basename if tools else "-"))

md5_sum = rule(
    implementation = _impl,
    attrs = {
        "filter": attr.string(default = "none"),
        "_filter_bin": attr.label(default = _get_filter),
        "out": attr.output(),
    },
)
"""


def test_computed_default_reads_the_attributes_it_names(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": COMPUTED,
            "pkg/BUILD": (
                'load(":defs.bzl", "md5_sum")\n'
                'genrule(name = "strip_comments", outs = ["s.sh"], cmd = "echo > $@")\n'
                'md5_sum(name = "a", filter = "comments", out = "a.txt")\n'
                'md5_sum(name = "b", out = "b.txt")\n'
            ),
        }
    )
    g = graph_of(root, "//pkg:a", "//pkg:b")
    got = writes(g)
    assert got["//pkg:a"] == "comments s.sh"
    assert got["//pkg:b"] == "none -"
    # The computed dependency is a real dependency: it was analysed.
    assert any(str(a.owner) == "//pkg:strip_comments" for a in g.actions)


def test_private_attribute_still_refuses_a_user_value(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/defs.bzl": COMPUTED,
            "pkg/BUILD": 'load(":defs.bzl", "md5_sum")\nmd5_sum(name = "a", _filter_bin = ":x")\n',
        }
    )
    with pytest.raises(BuildError, match="is private"):
        graph_of(root)


FEATURES = """
def _impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(out, "%s|%s" % (",".join(ctx.features), ",".join(ctx.disabled_features)))
    return [DefaultInfo(files = depset([out]))]

myrule = rule(implementation = _impl)
"""


def test_features_merge_package_and_target(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/rule.bzl": FEATURES,
            "pkg/BUILD": (
                'load(":rule.bzl", "myrule")\n'
                'package(features = ["foo"])\n'
                'myrule(name = "t1")\n'
                'myrule(name = "t2", features = ["bar"])\n'
                'myrule(name = "t3", features = ["-foo", "bar", "baz"])\n'
            ),
        }
    )
    got = writes(graph_of(root))
    assert got == {"//pkg:t1": "foo|", "//pkg:t2": "bar,foo|", "//pkg:t3": "bar,baz|foo"}


def test_package_features_must_be_strings(make_ws: MakeWs) -> None:
    root = make_ws({"pkg/BUILD": "package(features = [1])\n"})
    with pytest.raises(BuildError, match=r"package\(features = ...\) must be a list of strings"):
        graph_of(root)


MACROS = """
def count_rules(name):
    rules = native.existing_rules()
    kinds = sorted(["%s:%s" % (n, r["kind"]) for n, r in rules.items()])
    g = native.existing_rule("g")
    native.genrule(name = name, outs = [name + ".txt"],
                   cmd = "echo '%s %s %s' > $@" % (" ".join(kinds), g["outs"], native.existing_rule("nope")))
"""


def test_existing_rules_sees_targets_declared_so_far(make_ws: MakeWs) -> None:
    root = make_ws(
        {
            "pkg/macros.bzl": MACROS,
            "pkg/BUILD": (
                'load(":macros.bzl", "count_rules")\n'
                'genrule(name = "g", outs = ["g.txt"], cmd = "echo > $@")\n'
                'filegroup(name = "fg", srcs = [":g"])\n'
                'count_rules(name = "c")\n'
                'genrule(name = "later", outs = ["l.txt"], cmd = "echo > $@")\n'
            ),
        }
    )
    g = graph_of(root, "//pkg:c")
    (a,) = [a for a in g.actions if str(a.owner) == "//pkg:c"]
    assert "echo 'fg:filegroup g:genrule [\"g.txt\"] None' > " in a.argv[2]


def test_late_bound_default_fails_naming_the_api(make_ws: MakeWs) -> None:
    # Bazel 4.2's other computed-default form, configuration_field(), is not supported.
    root = make_ws(
        {
            "pkg/defs.bzl": (
                "def _i(ctx):\n    pass\n"
                "r = rule(implementation = _i, attrs = {'_cov': attr.label(\n"
                "    default = configuration_field(fragment = 'coverage', name = 'output_generator'))})\n"
            ),
            "pkg/BUILD": 'load(":defs.bzl", "r")\nr(name = "x")\n',
        }
    )
    with pytest.raises(BuildError, match="configuration_field: Bazel has this API") as e:
        graph_of(root)
    assert e.value.location is not None and (e.value.location.file, e.value.location.line) == (
        "pkg/defs.bzl",
        4,
    )
