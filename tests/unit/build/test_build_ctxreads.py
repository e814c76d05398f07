"""Attributes an implementation cannot read reach its ctx as None; the rest as before."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build.api import load_and_analyze
from rbs.build.ctxreads import source_reads
from rbs.build.errors import BuildError
from rbs.build.graph import ActionGraph, ActionSpec

MakeWs = Callable[[dict[str, str]], Path]


def test_reads_of_an_implementation_that_names_each_attribute() -> None:
    src = (
        "def _impl(ctx):\n"
        "    def helper(f):\n"
        "        return f.path + ctx.attr.suffix\n"
        "    out = ctx.outputs.out\n"
        "    ctx.actions.write(out, ' '.join([helper(f) for f in ctx.files.srcs]))\n"
        "    return [DefaultInfo(files = depset([out]), executable = ctx.executable.tool)]\n"
    )
    reads = source_reads(src, "_impl")
    assert reads is not None
    assert reads["attr"] == {"suffix"}
    assert reads["files"] == {"srcs"}
    assert reads["outputs"] == {"out"}
    assert reads["executable"] == {"tool"}
    assert reads["file"] == frozenset()


@pytest.mark.parametrize(
    "body",
    [
        "    return helper(ctx)\n",  # ctx handed on
        "    return getattr(ctx.attr, 'srcs')\n",  # ctx.attr as a value
        "    return dir(ctx.files)\n",
        "    ctx = 1\n    return ctx\n",  # rebound
        "    return [ctx for ctx in []]\n",  # a comprehension rebinds it
        "    def inner(ctx):\n        return ctx.attr.x\n    return inner\n",  # shadowed
        "    return print(ctx)\n",
    ],
)
def test_any_other_use_of_ctx_reads_everything(body: str) -> None:
    assert source_reads("def _impl(ctx):\n" + body, "_impl") is None


def test_an_unknown_or_doubly_defined_function_reads_everything() -> None:
    assert source_reads("def _other(ctx):\n    return ctx.attr.a\n", "_impl") is None
    twice = "def _impl(ctx):\n    return ctx.attr.a\n" * 2
    assert source_reads(twice, "_impl") is None
    assert source_reads("def _impl(ctx:\n", "_impl") is None  # does not parse
    assert source_reads("def _impl(*args):\n    return args\n", "_impl") is None
    none = source_reads("def _impl():\n    return []\n", "_impl")
    assert none is not None and not any(none.values())


# Two rules over the same dependency: one reads ctx.files only (its ctx.attr.dep is None,
# never looked at), one reads the dependency's providers; one hands ctx to a helper.
DEFS = """
Info = provider(fields = ["word"])

def _lib_impl(ctx):
    return [Info(word = ctx.attr.word), DefaultInfo(files = depset(ctx.files.srcs))]

def _files_impl(ctx):
    ctx.actions.write(ctx.outputs.out, " ".join([f.path for f in ctx.files.dep]))

def _providers_impl(ctx):
    ctx.actions.write(ctx.outputs.out, ctx.attr.dep[0][Info].word)

def _write(ctx):
    ctx.actions.write(ctx.outputs.out, "%s %s" % (ctx.attr.dep[0][Info].word, sorted(dir(ctx.attr))))

def _helper_impl(ctx):
    _write(ctx)

lib = rule(implementation = _lib_impl, attrs = {"word": attr.string(), "srcs": attr.label_list(allow_files = True)})
files = rule(implementation = _files_impl, attrs = {"dep": attr.label_list(), "out": attr.output()})
providers = rule(implementation = _providers_impl, attrs = {"dep": attr.label_list(), "out": attr.output()})
helper = rule(implementation = _helper_impl, attrs = {"dep": attr.label_list(), "out": attr.output()})
"""

BUILD = """
load(":defs.rbs", "lib", "files", "providers", "helper")
lib(name = "l", word = "hello", srcs = ["a.txt"])
files(name = "f", dep = [":l"], out = "f.txt")
providers(name = "p", dep = [":l"], out = "p.txt")
helper(name = "h", dep = [":l"], out = "h.txt")
"""


def writes(g: ActionGraph) -> dict[str, str]:
    return {
        str(a.owner): a.content.decode()
        for a in g.actions
        if isinstance(a, ActionSpec) and a.kind == "write"
    }


def test_rules_see_what_they_read(make_ws: MakeWs) -> None:
    root = make_ws({"pkg/defs.rbs": DEFS, "pkg/BUILD": BUILD, "pkg/a.txt": "a\n"})
    g = load_and_analyze(root, ("//pkg:f", "//pkg:p", "//pkg:h"))[1]
    names = '["dep", "name", "out", "tags", "testonly"]'
    assert writes(g) == {
        "//pkg:f": "pkg/a.txt",
        "//pkg:p": "hello",
        "//pkg:h": f"hello {names}",
    }


def test_a_target_declared_with_values_json_cannot_carry_loads_the_same(make_ws: MakeWs) -> None:
    # An int-keyed dict does not read back from JSON unchanged: it crosses as values, and
    # the attribute check words the error as before.
    root = make_ws(
        {
            "pkg/defs.rbs": (
                "def _impl(ctx):\n    return []\n"
                "r = rule(implementation = _impl, attrs = {'d': attr.string_dict()})\n"
            ),
            "pkg/BUILD": 'load(":defs.rbs", "r")\nr(name = "x", d = {1: "a"})\n',
        }
    )
    with pytest.raises(BuildError) as ei:
        load_and_analyze(root, ("//pkg:x",))
    assert "must be a dict of strings to strings, got dict {1: 'a'}" in ei.value.message
    assert ei.value.location is not None and ei.value.location.line == 2
