"""Rule implementation data and providers cross as JSON text only where that is exact."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from rbs.build import handover
from rbs.build.api import load_and_analyze
from rbs.build.errors import BuildError
from rbs.build.graph import ActionGraph, ActionSpec

MakeWs = Callable[[dict[str, str]], Path]


def test_json_text_refuses_what_starlark_would_read_back_otherwise() -> None:
    assert handover.json_text({"a": [1, "x", None, True], "b": (1, 2)}) == (
        '{"a":[1,"x",null,true],"b":[1,2]}'
    )
    assert handover.json_text({"f": math.nan}) is None
    assert handover.json_text({"f": math.inf}) is None
    assert handover.json_text({"n": 10**30}) is None  # json.decode would make it a float
    assert handover.json_text({"n": [1, -(10**20)]}) is None
    assert handover.json_text({"n": {"k": 10**19}}) is None
    # Long digit runs inside strings read back as those strings.
    assert handover.json_text({"s": "1" * 25}) == '{"s":"' + "1" * 25 + '"}'
    assert handover.json_text({"o": object()}) is None


# A provider that JSON cannot carry unchanged (int keys, a tuple, a long integer, a float)
# next to one it can: dependents read the same values either way.
DEFS = """
Odd = provider(fields = ["keys", "pair", "big", "ratio"])
Plain = provider(fields = ["names"])

def _odd_impl(ctx):
    return [Odd(keys = {1: "one", 2: "two"}, pair = (1, 2), big = 10 * 1000000000000000000000, ratio = 0.5),
            Plain(names = ["a", "b"])]

def _use_impl(ctx):
    o = ctx.attr.dep[Odd]
    p = ctx.attr.dep[Plain]
    text = "%s %s %s %s %s" % (sorted(o.keys.items()), list(o.pair), o.big, o.ratio, p.names)
    ctx.actions.write(ctx.outputs.out, text)

odd = rule(implementation = _odd_impl)
use = rule(implementation = _use_impl, attrs = {"dep": attr.label(), "out": attr.output()})
"""


def writes(g: ActionGraph) -> dict[str, str]:
    return {
        str(a.owner): a.content.decode()
        for a in g.actions
        if isinstance(a, ActionSpec) and a.kind == "write"
    }


@pytest.mark.parametrize("fast", [True, False])
def test_providers_read_the_same_through_json_and_through_values(
    make_ws: MakeWs, monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    if not fast:
        monkeypatch.setattr(handover, "json_text", lambda data: None)
    root = make_ws(
        {
            "pkg/defs.rbs": DEFS,
            "pkg/BUILD": (
                'load(":defs.rbs", "odd", "use")\n'
                'odd(name = "o")\n'
                'use(name = "u", dep = ":o", out = "u.txt")\n'
            ),
        }
    )
    g = load_and_analyze(root, ("//pkg:u",))[1]
    # A provider's dict keys are strings on both paths (`_plain`); a tuple reads as a list.
    want = '[("1", "one"), ("2", "two")] [1, 2] 10000000000000000000000 0.5 ["a", "b"]'
    assert writes(g) == {"//pkg:u": want}


# ctx.expand_make_variables expands plain make variables in Starlark and leaves
# $(location ...) and every error to Python (rbs/build/expand.py): the same text either way.
EXPAND_DEFS = """
def _ex_impl(ctx):
    subs = {"X": "x1", "Y": "y 2", "@": "out.txt", "<": "in.txt", "A B": "spaced"}
    text = "\\n".join([ctx.expand_make_variables("cmd", t, subs) for t in ctx.attr.texts])
    ctx.actions.write(ctx.outputs.out, text)

ex = rule(implementation = _ex_impl, attrs = {"texts": attr.string_list(), "out": attr.output()})
"""

EXPAND_TEXTS = [
    "",
    "plain text, no variables",
    "cp $< $@",
    "$(X)$(Y)$X$Y",
    "$$ $$X $$(X) $$$X a$$$$b",
    "$(X))( $@$<",
    "$(A B)",
    "end $$",
]


def test_make_variables_expand_as_python_does(make_ws: MakeWs) -> None:
    from rbs.build.expand import expand

    subs = {"X": "x1", "Y": "y 2", "@": "out.txt", "<": "in.txt", "A B": "spaced"}
    texts = ", ".join(repr(t) for t in EXPAND_TEXTS)
    root = make_ws(
        {
            "pkg/defs.rbs": EXPAND_DEFS,
            "pkg/BUILD": f'load(":defs.rbs", "ex")\nex(name = "e", texts = [{texts}], out = "e.txt")\n',
        }
    )
    g = load_and_analyze(root, ("//pkg:e",))[1]
    want = "\n".join(expand(t, subs, lambda *a: "") for t in EXPAND_TEXTS)
    assert writes(g) == {"//pkg:e": want}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("echo $(NOPE)", "$(NOPE) is not defined; known here:"),
        ("echo $Q", "$Q is not defined (write $$ for a literal $"),
        ("echo $", "unterminated $ at the end"),
        ("echo $(X", "unterminated $( in"),
        ("echo $( X)", "$( X) is not defined"),
    ],
)
def test_make_variable_errors_are_python_s(make_ws: MakeWs, text: str, error: str) -> None:
    root = make_ws(
        {
            "pkg/defs.rbs": EXPAND_DEFS,
            "pkg/BUILD": f'load(":defs.rbs", "ex")\nex(name = "e", texts = [{text!r}], out = "e.txt")\n',
        }
    )
    with pytest.raises(BuildError) as ei:
        load_and_analyze(root, ("//pkg:e",))
    assert error in ei.value.message
    assert "attribute 'cmd'" in ei.value.message
