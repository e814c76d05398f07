"""Source lowering keeps Starlark's meaning for ordinary values and every line in place."""

from __future__ import annotations

import starlark as sl

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
