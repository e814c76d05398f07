"""Loading: evaluate BUILD files and `.rbs` modules with starlark-pyo3 into packages."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path
from typing import Any

import starlark as sl

from rbs.build import existing, handover
from rbs.build.aspects import AspectClass, new_aspect
from rbs.build.compat import compat_ast, lower_build, lower_module, skylib_module
from rbs.build.ctxreads import Reads
from rbs.build.errors import (
    BuildError,
    Location,
    call_site,
    closest,
    location_from_starlark,
    starlark_message,
)
from rbs.build.labels import RBS_REPO, Label, parse_label, parse_load_label
from rbs.build.pkgcache import LoadDeps
from rbs.build.rules import (
    AttrSpec,
    Package,
    RuleClass,
    Target,
    check_attrs,
    implicit_outputs,
)
from rbs.build.select import BuildConfig, is_select, resolve_selects
from rbs.build.starlark_env import (
    BUILD_FILE,
    BUILTINS_MODULE,
    GLOBALS,
    RBS_FILE,
    FileKind,
    ImplHooks,
    prelude_ast,
)
from rbs.build.toolchains import toolchain_types
from rbs.build.unsupported import missing_api
from rbs.build.workspace import Workspace, glob, missing_package, package_files

log = logging.getLogger(__name__)

_UNDEFINED = re.compile(r"^error: Variable `\w+` not found", re.MULTILINE)
_ASSIGN = re.compile(r"^([A-Za-z_]\w*)\s*=\s*(rule|provider|aspect)\s*\(", re.MULTILINE)
# load() targets of Bazel rule sets whose rules rbs provides itself (same names).
COMPAT_MODULES = {"@rules_python//python:defs.bzl", "@rules_python//python:py_binary.bzl"}
COMPAT_REPOS = {
    "@rules_python//python",
    "@rules_shell//shell",
    "@bazel_tools//tools/build_defs/shell",
}


CC_REPOS = {"@rules_cc//cc"}
CC_MODULE = "@rbs//cc.rbs"


def display_path(label: Label) -> str:
    """How a file is named in messages: workspace-relative, or @rbs//... for shipped rules."""
    return f"@{label.repo}//{label.path}" if label.repo else label.path


class Loader:
    """Loads packages and `.rbs` modules; caches both for the life of the process."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self._root = str(ws.root)
        self.modules: dict[Label, Any] = {}  # label -> starlark FrozenModule
        self.rules: dict[str, RuleClass] = {}
        self.aspects: dict[str, AspectClass] = {}
        self.aspect_names: dict[str, str] = {}  # key -> the name it is assigned to
        self.providers: dict[str, str] = {}  # provider key -> exported name
        self.packages: dict[str, Package] = {}
        self.files_read: dict[str, Path] = {}  # display path -> file (for the state cache)
        self.module_texts: dict[str, str] = {}  # display path -> the text evaluated
        self.impl_reads: dict[str, Reads | None] = {}  # rule key -> what its impl reads
        self.globbed: set[str] = set()  # packages whose folder listing was used
        self.dirs_read: list[str] = []  # folders listed (by glob or file lookups)
        self.deps = LoadDeps()  # what each package's loading read (rbs.build.pkgcache)
        self._loading: list[Label] = []
        self._current: Package | None = None
        self._pending_rules: dict[Label, list[str]] = {}
        self._pending_providers: dict[Label, list[str]] = {}
        self._file_lists: dict[str, list[str]] = {}
        self.inner_error: BuildError | None = None
        self.config = BuildConfig()  # what select() reads (set by the driver)
        # Targets whose attributes hold a select(), resolved once their package is loaded.
        self.deferred_selects: dict[str, list[tuple[str, Any, dict[str, Any], str]]] = {}
        self._inflight: dict[str, Package] = {}
        # Targets whose select() matched no condition: the error, raised when built.
        self.select_errors: dict[Label, BuildError] = {}
        # Set by the analyser while a rule implementation runs.
        self.impl: ImplHooks | None = None

    # -- modules ---------------------------------------------------------------------

    def _read(self, label: Label) -> str:
        path = self.ws.repo_root(label.repo) / label.path
        try:
            text = path.read_text()
        except FileNotFoundError:
            near = None
            if path.parent.is_dir():
                names = [p.name for p in path.parent.iterdir() if p.suffix in (".rbs", ".bzl")]
                near = closest(label.name, names)
            hint = f"; did you mean {label.sibling(near)}?" if near else ""
            raise FileNotFoundError(
                f"cannot load {label}: no file {display_path(label)}{hint}"
            ) from None
        self.files_read[display_path(label)] = path
        return text

    def _file_loader(self, requester: Label) -> Any:
        def load(module_id: str) -> Any:
            shipped = skylib_module(module_id)
            if shipped is not None:
                return self.module(parse_load_label(shipped, package=""))
            if module_id.split(":")[0] in CC_REPOS:
                # No C++ toolchain: these cc_* rules load, and fail when analysed.
                return self.module(parse_load_label(CC_MODULE, package=""))
            if module_id.split(":")[0] in COMPAT_REPOS or module_id in COMPAT_MODULES:
                # Bazel workspaces load the native rules from these; rbs has them built in.
                return self.module(parse_load_label(BUILTINS_MODULE, package=""))
            try:
                lab = parse_load_label(module_id, package=requester.package, repo=requester.repo)
            except ValueError as e:
                raise ValueError(str(e)) from None
            try:
                return self.module(lab)
            except BuildError as e:
                # Starlark prefixes "error: " itself: pass on the bare message and hint.
                raise ValueError(f"{e.message}; {e.hint}" if e.hint else e.message) from None

        return sl.FileLoader(load)

    def module(self, label: Label) -> Any:
        """The frozen module of a `.rbs` file, evaluated once per process."""
        self.deps.module(self._loading[-1] if self._loading else None, label)
        cached = self.modules.get(label)
        if cached is not None:
            return cached
        if label in self._loading:
            chain = " -> ".join(
                str(x) for x in [*self._loading[self._loading.index(label) :], label]
            )
            raise ValueError(f"load cycle: {chain}")
        self._loading.append(label)
        try:
            text = self._read(label)
            self.module_texts[display_path(label)] = text
            m = self._new_module(RBS_FILE, label)
            loader = self._file_loader(label)
            if label.repo != RBS_REPO:
                # The shipped rules are what `native` is made of; they do without it.
                sl.eval(m, RBS_FILE.natives_ast(), GLOBALS, loader)
            try:
                ast = sl.parse(display_path(label), lower_module(text), RBS_FILE.dialect)
                sl.eval(m, ast, GLOBALS, loader)
                self._merge_providers(m, ast, loader)
            except sl.StarlarkError as e:
                # Report the error in the loaded file itself, not at the load() line.
                if self.inner_error is None:
                    missing = missing_api(str(e), self.source_line)
                    self.inner_error = (
                        BuildError(missing[0], location=missing[1])
                        if missing is not None
                        else _to_build_error(str(e), display_path(label))
                    )
                raise ValueError(f"error in {display_path(label)}") from None
            self._name_rules(label, text)
            frozen = m.freeze()
        finally:
            self._loading.pop()
        self.modules[label] = frozen
        return frozen

    def _merge_providers(self, m: Any, ast: Any, loader: Any) -> None:
        # A rule implementation reads `dep[SomeInfo]`, so its module must know the
        # constructor of every provider it can name: its own plus those of its loads.
        loads = [ld.module_id for ld in ast.loads()]
        if not loads:
            return
        lines = [f"load({mid!r}, __rbs_p{i} = 'rbs_providers')" for i, mid in enumerate(loads)]
        for i in range(len(loads)):
            lines.append(f"for __k, __v in __rbs_p{i}().items():")
            lines.append("    if __k not in _PROVIDERS:")
            lines.append("        _PROVIDERS[__k] = __v")
        text = "\n".join(lines) + "\n"
        sl.eval(m, sl.parse("<rbs providers>", text, RBS_FILE.dialect), GLOBALS, loader)

    def _name_rules(self, label: Label, text: str) -> None:
        # rule() cannot know the name it is assigned to; the assignments in the source do.
        names = {"rule": [], "provider": [], "aspect": []}  # type: dict[str, list[str]]
        for m in _ASSIGN.finditer(text):
            names[m.group(2)].append(m.group(1))
        keys = self._pending_rules.pop(label, [])
        for i, key in enumerate(keys):
            kind = names["rule"][i] if len(names["rule"]) == len(keys) else f"rule#{i}"
            self.rules[key] = dataclasses.replace(self.rules[key], kind=kind)
        akeys = [k for k, a in self.aspects.items() if a.module == label]
        if len(names["aspect"]) == len(akeys):
            self.aspect_names.update(zip(akeys, names["aspect"], strict=True))
        pkeys = self._pending_providers.pop(label, [])
        for i, key in enumerate(pkeys):
            if len(names["provider"]) == len(pkeys):
                self.providers[key] = names["provider"][i]

    def _new_module(self, kind: FileKind, label: Label) -> Any:
        """A fresh module holding the builtins of `kind` (and the prelude of `.rbs` files)."""
        m = sl.Module()
        kind.bind(m, self, label)
        if kind.prelude:
            sl.eval(m, compat_ast(), GLOBALS)
            sl.eval(m, prelude_ast(), GLOBALS)
        return m

    # -- builtins of .rbs files (the Host side of rbs.build.starlark_env) ---------------

    def new_rule(
        self,
        module: Label,
        attrs: dict[str, Any],
        executable: bool,
        test: bool,
        doc: str,
        outputs: Any = None,
        toolchains: Any = None,
        implementation: str = "",
    ) -> str:
        specs: dict[str, AttrSpec] = {}
        for name, d in attrs.items():
            if not isinstance(d, dict) or "_attr" not in d:
                raise ValueError(
                    f"attrs[{name!r}] must be made by attr.*(), e.g. attr.label_list()"
                )
            if name == "name":
                raise ValueError("'name' is implicit: every rule has it; remove it from attrs")
            specs[name] = AttrSpec.from_starlark(name, d)
        pending = self._pending_rules.setdefault(module, [])
        key = f"{module}%{len(pending)}"
        pending.append(key)
        self.rules[key] = RuleClass(
            key=key,
            kind=f"rule#{len(pending) - 1}",
            module=module,
            attrs=specs,
            executable=bool(executable),
            test=bool(test),
            doc=str(doc),
            outputs=implicit_outputs(outputs),
            toolchains=toolchain_types(toolchains, module),
            impl=str(implementation),
        )
        return key

    def new_provider(self, module: Label, doc: str = "") -> str:
        pending = self._pending_providers.setdefault(module, [])
        key = f"{module}%p{len(pending)}"
        pending.append(key)
        self.providers[key] = key
        return key

    def new_aspect(
        self, module: Label, attr_aspects: Any = None, attrs: Any = None, doc: str = ""
    ) -> str:
        key = f"{module}%a{sum(1 for a in self.aspects.values() if a.module == module)}"
        self.aspects[key] = new_aspect(module, key, attr_aspects or [], attrs, doc)
        return key

    def package_decl(self, **kwargs: Any) -> None:
        """package(...): rbs keeps `features`; the other arguments are accepted and ignored."""
        feats = kwargs.get("features")
        if feats is not None:
            if not isinstance(feats, list) or not all(isinstance(x, str) for x in feats):
                raise ValueError(
                    f"package(features = ...) must be a list of strings, got {feats!r}"
                )
            self._pkg("package()").features = list(feats)

    def existing_rules(self) -> dict[str, dict[str, Any]]:
        pkg = self._pkg("native.existing_rules()")
        return {**existing.existing_rules(pkg), **self._selecting(pkg)}

    def existing_rule(self, name: str) -> dict[str, Any] | None:
        pkg = self._pkg("native.existing_rule()")
        target = pkg.targets.get(name)
        return existing.rule_dict(target) if target is not None else self._selecting(pkg).get(name)

    def _selecting(self, pkg: Package) -> dict[str, dict[str, Any]]:
        # Targets with a select() are registered after the file: show them as declared.
        return {
            name: {**attrs, "name": name, "kind": self.rules[rule].kind}
            for rule, name, attrs, _ in self.deferred_selects.get(pkg.name, [])
        }

    def function_params(self, function: str) -> list[str]:
        return existing.function_params(function, self.files_read)

    def running_impl(self, what: str) -> ImplHooks:
        if self.impl is None:
            raise ValueError(f"{what} can only be called from a rule implementation")
        return self.impl

    # -- BUILD-file builtins ---------------------------------------------------------

    def _pkg(self, what: str) -> Package:
        if self._current is None:
            raise ValueError(
                f"{what} can only be called while a BUILD file is loaded (not at analysis)"
            )
        return self._current

    def register_target(self, rule: str, name: Any, attrs: dict[str, Any], stack: str) -> None:
        pkg = self._pkg("a rule")
        rc = self.rules[rule]
        if any(is_select(v) for v in attrs.values()):
            self.deferred_selects.setdefault(pkg.name, []).append((rule, name, attrs, stack))
            return
        if not isinstance(name, str):
            raise ValueError(f"{rc.kind}: name must be a string, got {name!r}")
        try:
            label = Label(package=pkg.name, name=name)
        except ValueError as e:
            raise ValueError(f"{rc.kind}(name = {name!r}): {e}") from None
        loc = call_site(stack, {pkg.build_file: pkg.source_lines})
        what = f"{rc.kind} {label}"
        if name in pkg.targets or name in pkg.outputs:
            prev = pkg.targets.get(name) or pkg.targets[pkg.outputs[name]]
            raise ValueError(
                f"duplicate target name {name!r} in package //{pkg.name}: already defined at "
                f"{prev.location}; rename one of them"
            )
        values = check_attrs(rc, attrs, what=what, package=pkg.name)
        target = Target(label=label, rule=rc, attrs=values, location=loc)
        for out in target.output_names():
            if os.path.isfile(os.path.join(self._root, pkg.name, out)):
                raise ValueError(
                    f"generated file {out!r} of {what} conflicts with the source file "
                    f"{pkg.name + '/' if pkg.name else ''}{out}; rename the output or the file"
                )
            if out in pkg.targets or out in pkg.outputs or out == name:
                raise ValueError(
                    f"output {out!r} of {what} clashes with an existing target or output of "
                    f"//{pkg.name}; choose another file name"
                )
            pkg.outputs[out] = name
        pkg.targets[name] = target

    def register_in(
        self, pkg: Package, rule: str, name: Any, attrs: dict[str, Any], stack: str
    ) -> None:
        """register_target for a target of `pkg` once its file has been evaluated."""
        prev, self._current = self._current, pkg
        try:
            self.register_target(rule, name, attrs, stack)
        finally:
            self._current = prev

    def files_of(self, package: str) -> list[str]:
        files = self._file_lists.get(package)
        if files is None:
            before = len(self.dirs_read)
            files = package_files(self.ws, package, dirs=self.dirs_read)
            self.deps.dirs[package] = self.dirs_read[before:]
            self._file_lists[package] = files
        return files

    def glob(
        self,
        include: Any = None,
        exclude: Any = None,
        exclude_directories: int = 1,
        allow_empty: bool = True,
    ) -> list[str]:
        pkg = self._pkg("glob()")
        for arg, what in ((include, "include"), (exclude, "exclude")):
            if arg is not None and (
                not isinstance(arg, list) or not all(isinstance(x, str) for x in arg)
            ):
                raise ValueError(f"glob({what} = ...) must be a list of strings, got {arg!r}")
        self.globbed.add(pkg.name)
        return glob(self.files_of(pkg.name), include or [], exclude or [], allow_empty=allow_empty)

    def package_name(self) -> str:
        return self._pkg("package_name()").name

    def exports_files(self, srcs: Any = None, visibility: Any = None, licenses: Any = None) -> None:
        pkg = self._pkg("exports_files()")
        pkg.exported.update(srcs or [])

    # -- packages --------------------------------------------------------------------

    def package(self, name: str) -> Package:
        """Load one package (once per process); errors carry the BUILD file location."""
        self.deps.package(name)
        cached = self.packages.get(name) or self._inflight.get(name)
        if cached is not None:
            return cached
        path = self.ws.build_file(name)
        if path is None:
            raise missing_package(name, self.ws.packages())
        rel = path.relative_to(self.ws.root).as_posix()
        text = path.read_text()
        self.files_read[rel] = path
        pkg = Package(name=name, build_file=rel, source_lines=text.splitlines())
        requester = Label(package=name, name=path.name)
        lowered, needs_compat = lower_build(text)
        prev, self._current = self._current, pkg
        self.deps.stack.append(name)
        try:
            try:
                self._evaluate_build(requester, rel, lowered, needs_compat, text)
            except sl.StarlarkError as e:
                if _UNDEFINED.search(str(e)) is None or f"\n --> {rel}:" not in str(e):
                    raise
                # Names are resolved before any statement runs: evaluate the file again
                # with every native rule in scope, which the error may suggest.
                self._evaluate_build(requester, rel, lowered, needs_compat, None)
        except sl.StarlarkError as e:
            self.deps.stack.pop()
            inner, self.inner_error = self.inner_error, None
            missing = missing_api(str(e), self.source_line)
            if inner is None and missing is not None:
                raise BuildError(missing[0], location=missing[1]) from None
            raise (inner or _to_build_error(str(e), rel, pkg.source_lines)) from None
        finally:
            self._current = prev
        try:
            if name in self.deferred_selects:
                self._inflight[name] = pkg
                try:
                    resolve_selects(self, pkg)
                finally:
                    del self._inflight[name]
        finally:
            self.deps.stack.pop()
        self.packages[name] = pkg
        return pkg

    def _evaluate_build(
        self, requester: Label, rel: str, lowered: str, needs_compat: bool, text: str | None
    ) -> None:
        # With the file's `text`, only the native rules it names are loaded.
        m = self._new_module(BUILD_FILE, requester)
        loader = self._file_loader(requester)
        if needs_compat:
            sl.eval(m, compat_ast(), GLOBALS)
        sl.eval(m, BUILD_FILE.natives_ast(text), GLOBALS, loader)
        sl.eval(m, sl.parse(rel, lowered, BUILD_FILE.dialect), GLOBALS, loader)

    def source_line(self, file: str, line: int) -> str | None:
        """Line `line` of a file named as in messages (workspace-relative or @repo//...)."""
        path = self.files_read.get(file)
        try:
            lines = path.read_text().splitlines() if path is not None else []
        except OSError:
            return None
        return lines[line - 1] if 0 < line <= len(lines) else None

    def call_impl(self, rule: RuleClass, data: dict[str, Any]) -> Any:
        return handover.call_impl(self.modules[rule.module], rule.key, data)


def _to_build_error(text: str, build_file: str, lines: list[str] | None = None) -> BuildError:
    msg = starlark_message(text)
    loc = location_from_starlark(text, prefer_file=build_file)
    if loc is not None and loc.column == 0 and lines and 0 < loc.line <= len(lines):
        line = lines[loc.line - 1]
        loc = Location(file=loc.file, line=loc.line, column=len(line) - len(line.lstrip()) + 1)
    hint = ""
    if "is not allowed in this dialect" in msg and "def" in msg:
        hint = "BUILD files cannot define functions; move the def into a .rbs file and load() it"
    elif "Parse error" in msg:
        hint = "fix the syntax at that position"
    elif "not found" in msg.lower() and "variable" in msg.lower():
        hint = "define it, or load() it from a .rbs file"
    elif "cannot load" in msg or "FileNotFoundError" in msg:
        hint = "check the path in the load() statement: //pkg:file.rbs, :file.rbs or @rbs//file.rbs"
    for pre in ("FileNotFoundError: ",):
        msg = msg.replace(pre, "")
    if "; did you mean" in msg and not hint:
        hint = ""
    return BuildError(msg, location=loc or Location(file=build_file), hint=hint)


def parse_target_label(text: str, package: str = "") -> Label:
    try:
        return parse_label(text, package=package)
    except ValueError as e:
        raise BuildError(str(e), hint="write //pkg:name") from None
