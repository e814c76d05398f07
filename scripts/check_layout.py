"""Check the module layout of rbs/: import cycles, package arrows, names and sizes.

Usage: python scripts/check_layout.py [--root DIR]

The checker reads DIR/rbs/**/*.py (all but the generated rbs/_proto) with `ast` and
imports none of it. Every import statement counts, wherever it stands: at module
level, in a function, under `if TYPE_CHECKING:` or in a try/except, because each of
them ties the two modules together. It reports, one per line as
`path:line: kind: message`:

- cycle: a group of modules that import each other, with one concrete cycle;
- string-import: `importlib.import_module()` or `__import__()` outside the command
  table modules (STRING_IMPORT_OWNERS); the table's entries count as imports;
- arrow: an import that points sideways or up in LAYERS, or is in FORBIDDEN_ARROWS;
- proto-import: an import of the generated rbs._proto outside PROTO_IMPORTERS;
- unknown-package: a package that LAYERS does not place;
- duplicate-class: a public class name defined in more than one place;
- long-module: a module over MAX_MODULE_LINES lines;
- syntax: a module that does not parse.

It exits 1 when it reports anything and 0 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import sys
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Packages below rbs/, lowest layer first. A module may import its own package and any
# package in a strictly lower layer; the root package `rbs` (for __version__) sits in
# layer 0 and every package may import it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_proto",),  # generated protobuf code
    ("model", "units"),
    # cas builds the REAPI messages that are its own data (Digest, Directory); wire
    # converts everything else, and its gRPC store client is a cas BlobStore.
    ("cas",),
    ("wire",),
    ("scheduler", "build"),
    ("client", "server", "executor"),
    ("cli",),
    ("__main__",),
)
ROOT_PACKAGE = "rbs"
GENERATED_PACKAGE = "_proto"
# The names `rbs` itself offers (`rbs.JobExecutor`), each imported on first use inside the
# root's module-level `__getattr__`, so `import rbs` stays free: the root package imports
# nothing else, and these lazy imports make no edge (the root sits below everything).
ROOT_EXPORTS: dict[str, str] = {"JobExecutor": "rbs.client.pyexec"}

# Arrows that are wrong whatever LAYERS says, each with the reason to print. Some are
# already implied by the layers; listing them here gives the author a plainer message.
FORBIDDEN_ARROWS: dict[tuple[str, str], str] = {
    ("model", "_proto"): "model is pure; protobuf conversion belongs in wire",
    ("units", "_proto"): "units is pure; protobuf conversion belongs in wire",
    ("server", "build"): "the server side never depends on the build front end",
    ("server", "client"): "the server side never depends on the client",
    ("executor", "build"): "the worker never depends on the build front end",
    ("executor", "client"): "the worker never depends on the client",
}

# Who may import the generated rbs._proto: packages (by name) whose data is protobuf,
# and modules (dotted). Everyone else gets typed values from rbs/wire's conversions.
PROTO_IMPORTERS: tuple[str, ...] = (
    "cas",  # Merkle trees are REAPI Directory messages; the one Digest conversion
    "wire",  # every other protobuf <-> model conversion, and the gRPC clients
    "build",  # an action is a REAPI Action: build/protos.py and reapi.py build Command/Action
    # The server's gRPC servicers receive and send messages (wire converts their content).
    "rbs.server.grpc_server",
    "rbs.server.bytestream",
    "rbs.server.cas_service",
    "rbs.server.action_cache",
    "rbs.server.capabilities",
    "rbs.server.execution",
    "rbs.server.workers_service",
    "rbs.server.bes_service",
)

# The only modules that may import by string, and the table they import from.
STRING_IMPORT_OWNERS = ("rbs.cli.main", "rbs.cli.root")
COMMAND_TABLE_MODULE = "rbs.cli.commands"
COMMAND_TABLES = ("COMMANDS",)
STRING_IMPORT_FUNCTIONS = ("import_module", "__import__")

MAX_MODULE_LINES = 500

# How a cycle message marks an edge that is not a plain import statement.
EDGE_NOTES = {
    "import": "",
    "implied": " (package __init__)",
    "string": " (by string)",
    "table": " (COMMANDS)",
}


@dataclass(frozen=True)
class Violation:
    """One problem, located at a line of a file relative to the root."""

    path: str
    line: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.message}"


@dataclass(frozen=True)
class Module:
    """A parsed module under rbs/."""

    name: str  # dotted, e.g. "rbs.cas.disk"; a package's __init__ is "rbs.cas"
    path: str  # relative to the root, e.g. "rbs/cas/disk.py"
    is_package: bool
    lines: int
    tree: ast.Module
    # The nodes the checks look at, gathered in one walk of the whole tree (any depth):
    # import statements, imports by string and class definitions.
    nodes: tuple[ast.Import | ast.ImportFrom | ast.Call | ast.ClassDef, ...]


@dataclass(frozen=True)
class Import:
    """One module importing another: `how` is import, string, table or implied."""

    src: str
    dst: str
    path: str
    line: int
    how: str


@dataclass(frozen=True)
class Report:
    """What one run found: the counts for the summary and the violations."""

    modules: int
    imports: int
    violations: list[Violation]


def package_of(name: str) -> str:
    """The package below rbs that a dotted module name belongs to ("rbs" for the root)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ROOT_PACKAGE


def is_internal(name: str) -> bool:
    return name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + ".")


def collect_modules(root: Path) -> tuple[dict[str, Module], list[Violation]]:
    """Parse every module under root/rbs except the generated package."""
    modules: dict[str, Module] = {}
    violations: list[Violation] = []
    for file in sorted((root / ROOT_PACKAGE).rglob("*.py")):
        relative = file.relative_to(root)
        if relative.parts[1] == GENERATED_PACKAGE:
            continue
        path = relative.as_posix()
        text = file.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text, filename=path)
        except SyntaxError as error:
            message = f"cannot parse: {error.msg}; fix the syntax so the layout can be checked"
            violations.append(Violation(path, error.lineno or 1, "syntax", message))
            continue
        is_package = relative.name == "__init__.py"
        parts = relative.parts[:-1] if is_package else (*relative.parts[:-1], relative.stem)
        name = ".".join(parts)
        nodes = tuple(
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom | ast.ClassDef)
            or (isinstance(node, ast.Call) and is_string_import(node))
        )
        modules[name] = Module(name, path, is_package, len(text.splitlines()), tree, nodes)
    return modules, violations


def resolve_from(module: Module, node: ast.ImportFrom) -> str | None:
    """The absolute module a `from X import ...` names, or None if it climbs past the top."""
    if node.level == 0:
        return node.module
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    parts = package.split(".")
    if node.level > len(parts):
        return None
    base = parts[: len(parts) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def root_lazy_nodes(module: Module) -> set[int]:
    """The ids of the nodes inside the root package's module-level `__getattr__`."""
    if module.name != ROOT_PACKAGE:
        return set()
    return {
        id(node)
        for func in module.tree.body
        if isinstance(func, ast.FunctionDef) and func.name == "__getattr__"
        for node in ast.walk(func)
    }


def statement_imports(module: Module, known: Mapping[str, Module]) -> Iterator[Import]:
    """Every `import` and `from ... import` in the module that names an rbs module (but a
    root export's lazy import: ROOT_EXPORTS)."""
    lazy = root_lazy_nodes(module)
    exports = set(ROOT_EXPORTS.values())
    for node in module.nodes:
        if id(node) in lazy and isinstance(node, ast.ImportFrom) and node.module in exports:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_internal(alias.name):
                    yield Import(module.name, alias.name, module.path, node.lineno, "import")
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(module, node)
            if base is None or not is_internal(base):
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                dst = submodule if submodule in known else base
                yield Import(module.name, dst, module.path, node.lineno, "import")


def is_string_import(node: ast.Call) -> bool:
    """Whether a call is importlib.import_module(...), import_module(...) or __import__(...)."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in STRING_IMPORT_FUNCTIONS
    return isinstance(func, ast.Name) and func.id in STRING_IMPORT_FUNCTIONS


def command_table(module: Module) -> list[Import]:
    """The modules listed in the COMMANDS tables, as imports from the table module."""
    imports: list[Import] = []
    for node in module.tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if not (isinstance(target, ast.Name) and target.id in COMMAND_TABLES):
            continue
        if not isinstance(value, ast.Dict):
            continue
        for entry in value.values:
            # An entry names its module, and may name a fast entry point "module:function".
            items = entry.elts if isinstance(entry, ast.Tuple | ast.List) else [entry]
            for item in items:
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    dst = item.value.partition(":")[0]
                    if is_internal(dst):
                        imports.append(Import(module.name, dst, module.path, entry.lineno, "table"))
    return imports


def string_imports(module: Module, table: Sequence[Import]) -> tuple[list[Import], list[Violation]]:
    """Imports by string in one module: the edges they make and the ones not allowed."""
    listed = {entry.dst for entry in table}
    imports: list[Import] = []
    violations: list[Violation] = []
    for node in module.nodes:
        if not isinstance(node, ast.Call):
            continue
        literal = node.args[0] if node.args else None
        name = literal.value if isinstance(literal, ast.Constant) else None
        if isinstance(name, str) and is_internal(name):
            imports.append(Import(module.name, name, module.path, node.lineno, "string"))
        if module.name not in STRING_IMPORT_OWNERS:
            message = (
                f"{module.name} imports by string; imports by string are listed in one table:"
                " rbs/cli/commands.py COMMANDS. Register the module there, or use an import statement"
            )
        elif isinstance(name, str) and name not in listed:
            message = (
                f"{module.name} imports {name!r} by string, but it is not in the table;"
                " imports by string are listed in one table: rbs/cli/commands.py COMMANDS. Add it there"
            )
        else:
            continue
        violations.append(Violation(module.path, node.lineno, "string-import", message))
    return imports, violations


def implied_imports(imports: Sequence[Import], known: Mapping[str, Module]) -> list[Import]:
    """The package __init__ modules that importing a submodule runs first.

    Importing rbs.a.b.c runs rbs/a/__init__.py and rbs/a/b/__init__.py. Packages that
    import nothing themselves are left out: they cannot close a cycle and would only
    add noise. So are the importer's own parent packages, which are already loaded (or
    loading) before the importer's body runs.
    """
    importers = {item.src for item in imports}
    implied: list[Import] = []
    for item in imports:
        parts = item.dst.split(".")
        for size in range(1, len(parts)):
            parent = ".".join(parts[:size])
            own_parent = item.src == parent or item.src.startswith(parent + ".")
            if parent in known and parent in importers and not own_parent:
                implied.append(Import(item.src, parent, item.path, item.line, "implied"))
    return implied


def strongly_connected(graph: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative; every node must be a key."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def shortest_cycle(component: Sequence[str], graph: Mapping[str, Sequence[str]]) -> list[str]:
    """A shortest cycle through the component's first module, as a closed path."""
    start = component[0]
    members = set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in graph[node]:
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if child in members and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start} in its own component")


def find_cycles(modules: Mapping[str, Module], imports: Sequence[Import]) -> list[Violation]:
    """One violation per group of modules that import each other."""
    first_edge: dict[tuple[str, str], Import] = {}
    for item in sorted(imports, key=lambda i: (i.line, i.how != "import")):
        if item.src != item.dst and item.dst in modules:
            first_edge.setdefault((item.src, item.dst), item)
    graph: dict[str, list[str]] = {name: [] for name in modules}
    for src, dst in sorted(first_edge):
        graph[src].append(dst)
    violations: list[Violation] = []
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        cycle = shortest_cycle(component, graph)
        edges = [first_edge[pair] for pair in itertools.pairwise(cycle)]
        where = ", ".join(f"{e.path}:{e.line}{EDGE_NOTES[e.how]}" for e in edges)
        group = ""
        if len(component) > len(cycle) - 1:
            group = f"; {len(component)} modules in this group: {', '.join(component)}"
        message = (
            f"{' -> '.join(cycle)} (imports at {where}){group}. Break one of these imports:"
            " move what both sides need into a lower module, or pass it in as a parameter;"
            " imports inside functions and under TYPE_CHECKING count too"
        )
        violations.append(Violation(edges[0].path, edges[0].line, "cycle", message))
    return violations


def layer_of() -> dict[str, int]:
    layers = {package: rank for rank, names in enumerate(LAYERS) for package in names}
    layers[ROOT_PACKAGE] = 0
    return layers


def describe_layers() -> str:
    names = [", ".join(names) for names in LAYERS]
    names[0] += f", {ROOT_PACKAGE}"
    return " < ".join(names)


def check_arrows(modules: Mapping[str, Module], imports: Sequence[Import]) -> list[Violation]:
    """Imports that point sideways or up the layers, and packages LAYERS does not place."""
    layers = layer_of()
    violations: set[Violation] = set()
    fix = "move the shared code into a lower layer, or invert the dependency"
    unknown_fix = "add it to LAYERS in scripts/check_layout.py, or move its modules"
    unknown: set[str] = set()
    for module in modules.values():
        package = package_of(module.name)
        if package not in layers and package not in unknown:
            unknown.add(package)
            message = f"package {package} is not in LAYERS; {unknown_fix}"
            violations.add(Violation(module.path, 1, "unknown-package", message))
    for item in imports:
        src, dst = package_of(item.src), package_of(item.dst)
        if src == dst or src in unknown:
            continue
        if dst not in layers:
            if dst not in unknown:
                message = f"{src} imports {item.dst}, whose package {dst} is not in LAYERS"
                violations.add(Violation(item.path, item.line, "unknown-package", message))
            continue
        if src == ROOT_PACKAGE:
            message = f"rbs/__init__.py imports {item.dst}; the root package imports nothing"
        else:
            reasons = [f"{dst} is not below {src}"] if layers[dst] >= layers[src] else []
            if (src, dst) in FORBIDDEN_ARROWS:
                reasons.append(FORBIDDEN_ARROWS[src, dst])
            if not reasons:
                continue
            why = "; ".join([*reasons, f"layers: {describe_layers()}"])
            message = f"{src} imports {dst} ({why}); {fix}"
        violations.add(Violation(item.path, item.line, "arrow", message))
    return sorted(violations, key=lambda v: (v.path, v.line, v.message))


def check_proto_imports(imports: Sequence[Import]) -> list[Violation]:
    """Imports of rbs._proto by a module that PROTO_IMPORTERS does not list."""
    violations: set[Violation] = set()
    for item in imports:
        src = package_of(item.src)
        if package_of(item.dst) != GENERATED_PACKAGE or src == GENERATED_PACKAGE:
            continue
        if src in PROTO_IMPORTERS or item.src in PROTO_IMPORTERS:
            continue
        if src == ROOT_PACKAGE or (src, GENERATED_PACKAGE) in FORBIDDEN_ARROWS:
            continue  # already an arrow violation
        message = (
            f"{item.src} imports {item.dst}; protobuf stays in the modules of PROTO_IMPORTERS"
            " in scripts/check_layout.py: convert through rbs/wire (add the conversion and"
            " a typed value there) and use what it returns"
        )
        violations.add(Violation(item.path, item.line, "proto-import", message))
    return sorted(violations, key=lambda v: (v.path, v.line))


def check_classes(modules: Mapping[str, Module]) -> list[Violation]:
    """Public class names defined in more than one place, at any nesting level."""
    places: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for module in modules.values():
        for node in module.nodes:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                places[node.name].append((module.path, node.lineno))
    violations: list[Violation] = []
    for name, found in sorted(places.items()):
        if len(found) < 2:
            continue
        found.sort()
        listed = ", ".join(f"{path}:{line}" for path, line in found)
        message = (
            f"class {name} is defined {len(found)} times ({listed}); keep one and import it,"
            " or give each a name that says how it differs"
        )
        violations.append(Violation(found[0][0], found[0][1], "duplicate-class", message))
    return violations


def check_sizes(modules: Mapping[str, Module]) -> list[Violation]:
    """Modules longer than MAX_MODULE_LINES."""
    return [
        Violation(
            module.path,
            1,
            "long-module",
            f"{module.lines} lines (limit {MAX_MODULE_LINES}); split it by concern",
        )
        for module in modules.values()
        if module.lines > MAX_MODULE_LINES
    ]


def analyse(root: Path) -> Report:
    """Run every check on root/rbs."""
    modules, violations = collect_modules(root)
    imports: list[Import] = []
    table = command_table(modules[COMMAND_TABLE_MODULE]) if COMMAND_TABLE_MODULE in modules else []
    imports.extend(table)
    for module in modules.values():
        imports.extend(statement_imports(module, modules))
        found, wrong = string_imports(module, table)
        imports.extend(found)
        violations.extend(wrong)
    violations.extend(find_cycles(modules, [*imports, *implied_imports(imports, modules)]))
    violations.extend(check_arrows(modules, imports))
    violations.extend(check_proto_imports(imports))
    violations.extend(check_classes(modules))
    violations.extend(check_sizes(modules))
    violations.sort(key=lambda v: (v.path, v.line, v.kind, v.message))
    edges = {(item.src, item.dst, item.line) for item in imports}
    return Report(len(modules), len(edges), violations)


def check(root: Path) -> list[Violation]:
    """Every layout violation under root/rbs, sorted by file and line."""
    return analyse(root).violations


def summary(report: Report) -> str:
    counts = {kind: 0 for kind in sorted({v.kind for v in report.violations})}
    for violation in report.violations:
        counts[violation.kind] += 1
    if not counts:
        return f"layout ok: {report.modules} modules, {report.imports} imports"
    by_kind = ", ".join(f"{kind} {count}" for kind, count in counts.items())
    return (
        f"layout: {len(report.violations)} violation{'' if len(report.violations) == 1 else 's'}"
        f" ({by_kind})"
        f" in {report.modules} modules, {report.imports} imports"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the directory that holds rbs/ (default: this repository)",
    )
    args = parser.parse_args(argv)
    root: Path = args.root
    if not (root / ROOT_PACKAGE).is_dir():
        parser.error(f"{root / ROOT_PACKAGE} is not a directory")
    report = analyse(root)
    for violation in report.violations:
        print(violation)
    print(summary(report))
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
