"""Source lowering: the few Starlark operations rbs gives Bazel's meaning by rewriting them.

starlark-pyo3 has no way to define new value types, so Bazel's `Target` (a value with
attributes that is also indexed by provider: `dep.label`, `dep[MyInfo]`, `MyInfo in
dep`), `Label` (printed as `//pkg:name`) and `select()` (added to lists with `+`) are
plain structs and dicts made by `compat.rbs`. The operations on them that Starlark
cannot be taught are rewritten, before the file is parsed by Starlark, into calls of
helpers from `compat.rbs`:

    a[K]          -> _rbs_at(a, K, "K")    K a name or dotted name (a provider)
    K in a        -> _rbs_in(K, a)         (and `not in`)
    a + b, a += b -> _rbs_add(a, b), a = _rbs_iadd(a, b)
    str(x), print(...), type(x), "..." % x, "...".format(...)   -> Bazel's forms
    x.relative(...), x.same_package_label(...)         -> _rbs_call(x, "relative", ...)

The rewrite keeps every line where it was (only text inside a line changes), so the
locations Starlark reports stay right; columns on a rewritten line may move. Python's
`ast` parses the Starlark subset; a file it cannot parse is passed on unchanged, and
Starlark reports its error. Top-level names of a user file that would shadow the
private helpers of the prelude (`_file = rule(...)`) are renamed in the file, since
both live in one Starlark module.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

# Helpers a lowered file calls; `compat.rbs` defines them.
HELPERS = ("_rbs_at", "_rbs_in", "_rbs_add", "_rbs_iadd", "_rbs_str", "_rbs_print", "_rbs_type")
_METHODS = ("relative", "same_package_label")
_RENAMED_PREFIX = "_rbs_user"


@dataclass(frozen=True, slots=True)
class _Edit:
    start: int  # byte offsets in the file
    end: int
    text: str
    order: tuple[int, int]  # how edits at one offset are ordered (see _apply)


def _key(node: ast.AST) -> bool:
    """A subscript key or `in` operand that may be a provider: a name or dotted name."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


class _Lowerer(ast.NodeVisitor):
    def __init__(self, data: bytes, renames: dict[str, str], add: bool) -> None:
        self.data = data
        self.starts = [0]
        for i, b in enumerate(data):
            if b == 0x0A:
                self.starts.append(i + 1)
        self.renames = renames
        self.add = add
        self.edits: list[_Edit] = []
        self.depth = 0
        # Names bound in the enclosing scopes: a parameter called `type` is not the builtin.
        self.bound: list[set[str]] = []

    def builtin(self, name: str) -> bool:
        """Whether `name` here means the builtin (no enclosing scope rebinds it)."""
        return name not in self.renames and not any(name in b for b in self.bound)

    def pos(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.pos(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.pos(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def open(self, at: int, text: str) -> None:
        self.edits.append(_Edit(at, at, text, (1, self.depth)))

    def close(self, at: int, text: str) -> None:
        self.edits.append(_Edit(at, at, text, (0, -self.depth)))

    def replace(self, start: int, end: int, text: str) -> None:
        self.edits.append(_Edit(start, end, text, (2, 0)))

    def token(self, start: int, end: int, pattern: bytes) -> tuple[int, int] | None:
        """The first match of `pattern` between two nodes, skipping comments."""
        i = start
        while i < end:
            c = self.data[i : i + 1]
            if c == b"#":
                nl = self.data.find(b"\n", i, end)
                i = end if nl < 0 else nl + 1
                continue
            m = re.compile(pattern).match(self.data, i, end)
            if m:
                return m.start(), m.end()
            i += 1
        return None

    def generic_visit(self, node: ast.AST) -> None:
        self.depth += 1
        super().generic_visit(node)
        self.depth -= 1

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        # f-strings (rbs's dialect only; Bazel has none): positions inside them are not
        # reliable in every Python, so nothing in them is rewritten.
        return

    def visit_Name(self, node: ast.Name) -> None:
        new = self.renames.get(node.id)
        if (
            new is None
            and node.id in ("str", "type")
            and isinstance(node.ctx, ast.Load)
            and self.builtin(node.id)
        ):
            new = f"_rbs_{node.id}"  # str as a value too: sorted(labels, key = str)
        if new is not None:
            s, e = self.span(node)
            self.replace(s, e, new)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        new = self.renames.get(node.name)
        if new is not None:
            s = self.pos(node.lineno, node.col_offset)
            hit = self.token(s, len(self.data), rb"def\s+" + node.name.encode() + rb"\b")
            if hit:
                self.replace(hit[0], hit[1], "def " + new)
        self.bound.append(_bound_in(node))
        self.generic_visit(node)
        self.bound.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.bound.append(_bound_in(node))
        self.generic_visit(node)
        self.bound.pop()

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and _key(node.slice):
            s, e = self.span(node)
            _, ve = self.span(node.value)
            ks, ke = self.span(node.slice)
            hit = self.token(ve, ks, rb"\[")
            if hit and self.data[e - 1 : e] == b"]":
                # The key's text names the provider in the error when it is missing.
                name = b" ".join(self.data[ks:ke].split()).decode()
                self.open(s, "_rbs_at(")
                self.replace(hit[0], hit[1], ", ")
                self.replace(e - 1, e, f', "{name}")')
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) and _key(node.left):
            s, e = self.span(node)
            _, le = self.span(node.left)
            rs, _ = self.span(node.comparators[0])
            neg = isinstance(node.ops[0], ast.NotIn)
            hit = self.token(le, rs, rb"not\s+in\b" if neg else rb"in\b")
            if hit:
                self.open(s, "(not _rbs_in(" if neg else "_rbs_in(")
                self.replace(hit[0], hit[1], ", ")
                self.close(e, "))" if neg else ")")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        op = None
        if self.add and isinstance(node.op, ast.Add):
            op, helper = rb"\+", "_rbs_add("
        elif isinstance(node.op, ast.Mod) and _is_str(node.left):
            op, helper = rb"%", "_rbs_mod("
        if op is not None:
            s, e = self.span(node)
            _, le = self.span(node.left)
            rs, _ = self.span(node.right)
            hit = self.token(le, rs, op)
            if hit:
                self.open(s, helper)
                self.replace(hit[0], hit[1], ", ")
                self.close(e, ")")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if self.add and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            _, te = self.span(node.target)
            vs, ve = self.span(node.value)
            hit = self.token(te, vs, rb"\+=")
            if hit:
                name = self.renames.get(node.target.id, node.target.id)
                self.replace(hit[0], hit[1], f"= _rbs_iadd({name}, ")
                self.close(ve, ")")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("str", "print", "type") and self.builtin(f.id):
            s, e = self.span(f)
            self.replace(s, e, f"_rbs_{f.id}")
            for child in (*node.args, *node.keywords):
                self.visit(child)
            return
        if isinstance(f, ast.Attribute) and (
            f.attr in _METHODS or (f.attr == "format" and _is_str(f.value))
        ):
            s, _ = self.span(node)
            _, ve = self.span(f.value)
            hit = self.token(ve, len(self.data), rb"\.\s*" + f.attr.encode() + rb"\s*\(")
            if hit:
                helper = "_rbs_format(" if f.attr == "format" else "_rbs_call("
                self.open(s, helper)
                self.replace(hit[0], hit[1], ", " if f.attr == "format" else f', "{f.attr}", ')
        self.generic_visit(node)


def _bound_in(fn: ast.FunctionDef | ast.Lambda) -> set[str]:
    """Parameters and names assigned in a function (not in nested functions)."""
    a = fn.args
    names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    todo: list[ast.AST] = list(body)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        if not isinstance(n, (ast.FunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))
    return names


def _apply(data: bytes, edits: list[_Edit]) -> bytes:
    # At one offset: closing text of nodes that end there (innermost first), then opening
    # text of nodes that start there (outermost first), then the token replaced there
    # (which begins the innermost of those nodes).
    edits.sort(key=lambda e: (e.start, e.order))
    out = bytearray()
    at = 0
    for e in edits:
        if e.start < at:
            continue  # overlapping edits cannot happen; keep the first to stay safe
        out += data[at : e.start]
        text = e.text.encode()
        if out and _WORD.match(out[-1:]) and _WORD.match(text[:1]):
            out += b" "  # `in{...}[K]` must not become `in_rbs_at(...)`
        out += text
        at = e.end
    out += data[at:]
    return bytes(out)


_WORD = re.compile(rb"\w")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


_LOAD = re.compile(r"^load\s*\(", re.MULTILINE)
_LOAD_NAME = re.compile(r"([A-Za-z_]\w*)\s*=")


def _loads(text: str) -> list[tuple[int, int]]:
    """Character spans of the top-level `load(...)` statements.

    Python's parser refuses Starlark's `load(":x", a = "b", "c")` (a positional
    argument after a keyword), so loads are blanked out before it sees the file."""
    spans = []
    for m in _LOAD.finditer(text):
        i, depth, quote = m.end(), 1, ""
        while i < len(text) and depth:
            c = text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = ""
            elif c in "\"'":
                quote = c
            elif c == "#":
                nl = text.find("\n", i)
                i = len(text) if nl < 0 else nl
                continue
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            i += 1
        spans.append((m.start(), i))
    return spans


def _load_bindings(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, str]]:
    """(offset, name) of each `name = "symbol"` binding in the load statements."""
    out = []
    for s, e in spans:
        for m in _LOAD_NAME.finditer(text, s, e):
            out.append((m.start(1), m.group(1)))
    return out


def lower(text: str, *, reserved: frozenset[str] = frozenset(), add: bool = True) -> str:
    """`text` with Bazel's Target, Label and select() operations made into helper calls.

    `reserved`: the private names of the prelude a user file must not rebind.
    `add`: rewrite `+` (needed wherever a select() may be added to)."""
    spans = _loads(text)
    masked = list(text)
    for s, e in spans:
        for i in range(s, e):
            if masked[i] != "\n":
                masked[i] = " "
    try:
        with warnings.catch_warnings():
            # Starlark strings such as "\." are fine; Python would warn about them.
            warnings.simplefilter("ignore")
            tree = ast.parse("".join(masked))
    except (SyntaxError, ValueError):
        return text
    bindings = _load_bindings(text, spans)
    clashes = (_top_level_names(tree) | {n for _, n in bindings}) & reserved
    renames = {n: f"{_RENAMED_PREFIX}{n}" for n in clashes}
    data = text.encode()
    low = _Lowerer(data, renames, add)
    # A file that rebinds `str` or `type` at the top means its own everywhere.
    low.bound.append(_top_level_names(tree) & {"str", "type", "print"})
    low.visit(tree)
    for at, name in bindings:
        if name in renames:
            s = len(text[:at].encode())
            low.replace(s, s + len(name.encode()), renames[name])
    if not low.edits:
        return text
    return _apply(data, low.edits).decode()


def original_name(name: str) -> str:
    """The name a user wrote, for a name `lower` renamed."""
    return name[len(_RENAMED_PREFIX) :] if name.startswith(_RENAMED_PREFIX + "_") else name


_TOP_PRIVATE = re.compile(r"^(?:def\s+)?(_\w+)\s*[=(]", re.MULTILINE)


def private_names(prelude_text: str) -> frozenset[str]:
    """The top-level private names a prelude defines (`_x = ...`, `def _x(...)`)."""
    return frozenset(_TOP_PRIVATE.findall(prelude_text))
