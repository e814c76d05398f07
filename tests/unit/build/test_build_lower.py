"""Source lowering keeps Starlark's meaning for ordinary values and every line in place."""

from __future__ import annotations

import starlark as sl
from hypothesis import given, settings
from hypothesis import strategies as st

from rbs.build.compat import compat_ast, lower_module
from rbs.build.lower import lower
from rbs.build.starlark_env import GLOBALS, RBS_DIALECT

PROGRAM = """
d = {"k": [1], "j": {"x": 2}}
K = "k"
l = [3, 4]
l += [5]
alias = l
alias += [6]
s = "a" + "b" + ("c" +
    "d")  # a comment with + and [ in it
t = d[K] + [d["j"]["x" if True else "y"] * 0] + [l[0], l[1:]]
u = K in d and "zz" not in d and (K) in (d)
v = "%s-%d" % ("x", 2) + "%s" % "y" + "{}/{k}".format(1, k = K)
w = str(l) + str(K)
def f(x, key = K):
    acc = []
    for i in range(3):
        acc += [x[key]] if key in x else []
    return acc
r = [d, l, alias, s, t, u, v, w, f(d), f({})]
"""


def run(text: str, *, with_compat: bool) -> object:
    m = sl.Module()
    if with_compat:
        m.add_callable("_rbs_parse_label", lambda s: ["", "", s])
        sl.eval(m, compat_ast(), GLOBALS)
    sl.eval(m, sl.parse("t.bzl", text, RBS_DIALECT), GLOBALS)
    return m["r"]


def test_lowered_program_computes_the_same_values() -> None:
    lowered = lower_module(PROGRAM)
    assert lowered != PROGRAM and "_rbs_at(" in lowered and "_rbs_add(" in lowered
    assert lowered.count("\n") == PROGRAM.count("\n")
    assert run(lowered, with_compat=True) == run(PROGRAM, with_compat=False)


def test_loads_with_a_keyword_before_a_positional_symbol_are_kept() -> None:
    text = 'load(":x.bzl", _file = "file", "y")\n_file(name = d[K])\n'
    out = lower(text, reserved=frozenset({"_file"}))
    assert out.splitlines() == [
        'load(":x.bzl", _rbs_user_file = "file", "y")',
        '_rbs_user_file(name = _rbs_at(d, K, "K"))',
    ]


def test_a_file_python_cannot_parse_is_passed_on_unchanged() -> None:
    text = "def f(:\n"
    assert lower(text) == text


def _expressions() -> st.SearchStrategy[str]:
    atoms = st.sampled_from(["L", "D", "S", "K", "I", "[1, 2]", '"ab"', "{'k': [3]}", "0"])
    space = st.sampled_from([" ", "", "\n    ", "  # c +[in\n    "])

    def grow(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.tuples(inner, space, inner).map(lambda t: f"({t[0]} +{t[1]}{t[2]})"),
            st.tuples(inner, space, inner).map(lambda t: f"({t[0]}{t[1]}in {t[2]})"),
            st.tuples(inner, space, inner).map(lambda t: f"({t[0]} not in{t[1]}{t[2]})"),
            st.tuples(inner, space).map(lambda t: f"{t[0]}[{t[1]}K]"),
            st.tuples(inner, space).map(lambda t: f"{t[0]}[{t[1]}I]"),
            inner.map(lambda e: f"str({e})"),
            inner.map(lambda e: f'("%s" % ({e},))'),
            inner.map(lambda e: f'"{{}}-{{k}}".format({e}, k = {e})'),
            inner.map(lambda e: f"type({e})"),
        )

    return st.recursive(atoms, grow, max_leaves=6)


def _outcome(text: str, with_compat: bool) -> tuple[bool, object]:
    program = 'L = [0, "k"]\nD = {"k": [1], 0: "z"}\nS = "k0"\nK = "k"\nI = 0\nr = ' + text + "\n"
    try:
        return True, run(program, with_compat=with_compat)
    except sl.StarlarkError:
        return False, None


@settings(max_examples=150, deadline=None)
@given(_expressions())
def test_lowering_never_changes_what_an_expression_computes(expr: str) -> None:
    lowered = lower_module("r = " + expr + "\n")[len("r = ") : -1]
    assert lowered.count("\n") == expr.count("\n")
    assert _outcome(lowered, True) == _outcome(expr, False), lowered


def test_a_local_str_or_type_is_not_the_builtin() -> None:
    text = (
        "def f(name, type = None):\n"
        "    return type == 'x' and str(name)\n"
        "def g(str):\n"
        "    return str\n"
        "k = sorted([], key = str)\n"
    )
    assert lower(text).splitlines() == [
        "def f(name, type = None):",
        "    return type == 'x' and _rbs_str(name)",
        "def g(str):",
        "    return str",
        "k = sorted([], key = _rbs_str)",
    ]
