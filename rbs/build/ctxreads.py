"""Which attributes a rule implementation can read through its ctx, from its source.

Every value put in a ctx costs: dependencies cross into Starlark as their providers
and are rebuilt there as Target values. Most implementations read `ctx.files.srcs`
and never `ctx.attr.srcs`. When the implementation's source shows every use of its
ctx parameter as `ctx.FIELD` and every use of `ctx.attr` (and of `ctx.files`,
`ctx.file`, `ctx.executable`, `ctx.outputs`) as `ctx.attr.NAME`, nothing else in it
can see the other attributes, so analysis passes None for them (the field is still
there: the struct has the same names). Anything else (ctx handed to a helper,
`getattr(ctx.attr, n)`, `dir(ctx.files)`, ctx rebound or shadowed, a lambda, a
function the file does not define exactly once, a file Python cannot parse) means
"may read anything", and every value is sent.
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Mapping

# The ctx fields whose values are dicts of attribute name -> value (see prelude's _mkctx).
FIELDS = ("attr", "files", "file", "executable", "outputs")

Reads = Mapping[str, frozenset[str]]  # field -> names read; absent analysis = read all


def impl_reads(function: str, texts: Mapping[str, str]) -> Reads | None:
    """`source_reads` of `file.rbs.fname` (how Starlark prints a function) in the text
    evaluated for that file."""
    file, _, name = function.rpartition(".")
    text = texts.get(file)
    return source_reads(text, name) if text is not None and name else None


def source_reads(text: str, name: str) -> Reads | None:
    """The names each of FIELDS can be read under by the function `name` defined in the
    Starlark source `text`, or None when the source does not show it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    defs = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
    ]
    if len(defs) != 1:
        return None
    fn = defs[0]
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    if not positional:
        # The ctx arrives positionally: without a parameter for it, `*args` holds it.
        return None if args.vararg is not None else {f: frozenset() for f in FIELDS}
    return _reads(fn, positional[0].arg)


def _reads(fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx: str) -> Reads | None:
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    reads: dict[str, set[str]] = {f: set() for f in FIELDS}
    own = fn.args.posonlyargs[0] if fn.args.posonlyargs else fn.args.args[0]
    for node in ast.walk(fn):
        if isinstance(node, ast.arg) and node.arg == ctx and node is not own:
            return None  # a nested function's parameter shadows ctx
        if not isinstance(node, ast.Name) or node.id != ctx:
            continue
        if not isinstance(node.ctx, ast.Load):
            return None  # ctx rebound (an assignment or a loop variable)
        up = parents.get(node)
        if not isinstance(up, ast.Attribute) or up.value is not node:
            return None  # ctx itself used as a value
        if up.attr not in FIELDS:
            continue
        top = parents.get(up)
        if not isinstance(top, ast.Attribute) or top.value is not up:
            return None  # ctx.attr (or files, ...) used as a value
        reads[up.attr].add(top.attr)
    return {f: frozenset(names) for f, names in reads.items()}
