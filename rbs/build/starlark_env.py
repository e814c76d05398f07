"""What each kind of Starlark file sees: its dialect, globals, prelude and builtins, in one table.

Every evaluation the loader runs takes its environment from `BUILD_FILE` or `RBS_FILE`
below: the Python builtins of that kind of file (bound to the loader per file), the
native rules loaded from `@rbs//builtins.rbs` before the file, and for `.rbs` files the
rule API of `prelude.rbs`. Python builtins reach back into the loader only through
the `Host` protocol, so this module imports no loading code.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import starlark as sl

from rbs.build.labels import Label, parse_label

# Starlark's own library, the same for both kinds of file.
GLOBALS = sl.Globals.extended_by(
    [
        sl.LibraryExtension.StructType,
        sl.LibraryExtension.Print,
        sl.LibraryExtension.Json,
        sl.LibraryExtension.CallStack,
    ]
)
RBS_DIALECT = sl.Dialect.extended()
RBS_DIALECT.enable_f_strings = True
BUILD_DIALECT = sl.Dialect.standard()
BUILD_DIALECT.enable_def = False
BUILD_DIALECT.enable_lambda = False

BUILTINS_MODULE = "@rbs//builtins.rbs"
# How the prelude is named in Starlark tracebacks; locations in it are never reported
# to the user (see rbs.build.errors.location_from_starlark).
PRELUDE_NAME = "<rbs prelude>"
NATIVES_NAME = "<rbs natives>"


class ImplHooks(Protocol):
    """What `ctx.actions` calls while a rule implementation runs (the analyser)."""

    def ctx_declare(
        self, filename: str, sibling: Any = None, directory: bool = False
    ) -> dict[str, Any]: ...
    def ctx_action(self, kind: str, outputs: Any, **kw: Any) -> None: ...
    def ctx_expand(
        self, text: str, vars: dict[str, str], targets: list[Any], attribute: str
    ) -> str: ...


class Host(Protocol):
    """The loader, as the builtins see it while it evaluates one file."""

    def glob(
        self,
        include: Any = None,
        exclude: Any = None,
        exclude_directories: int = 1,
        allow_empty: bool = True,
    ) -> list[str]: ...
    def package_name(self) -> str: ...
    def exports_files(
        self, srcs: Any = None, visibility: Any = None, licenses: Any = None
    ) -> None: ...
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
    ) -> str: ...
    def new_provider(self, module: Label, doc: str = "") -> str: ...
    def register_target(self, rule: str, name: Any, attrs: dict[str, Any], stack: str) -> None: ...
    def running_impl(self, what: str) -> ImplHooks: ...
    def package_decl(self, **kwargs: Any) -> None: ...
    def new_aspect(
        self, module: Label, attr_aspects: Any = None, attrs: Any = None, doc: str = ""
    ) -> str: ...
    def existing_rules(self) -> dict[str, dict[str, Any]]: ...
    def existing_rule(self, name: str) -> dict[str, Any] | None: ...
    def function_params(self, function: str) -> list[str]: ...


# A table entry: given the loader and the file being evaluated, the Python callable (or
# plain value) that Starlark sees under the entry's name.
Bind = Callable[[Host, Label], object]


def _fixed(value: object) -> Bind:
    return lambda host, module: value


def _ignored(**kwargs: Any) -> None:
    """package(), package_group(): accepted for Bazel compatibility; rbs needs neither."""


def _ignored_licenses(*args: Any, **kwargs: Any) -> None:
    """licenses([...]): accepted for Bazel compatibility."""


def _parse_label_in(module: Label, text: str) -> list[str]:
    """Label("...") in `module`: [repo, package, name] (compat.rbs makes the value)."""
    lab = parse_label(text, package=module.package, repo=module.repo)
    return [lab.repo, lab.package, lab.name]


def _job_spec(**kw: Any) -> dict[str, Any]:
    # Job rules (@rbs//job/rules.rbs) check their values with the job parsers, which
    # only they need: imported on first use.
    from rbs.build.jobtarget import job_spec

    return job_spec(**kw)


def _declare(host: Host, module: Label) -> Callable[..., Any]:
    return lambda **kw: host.running_impl("declare").ctx_declare(**kw)


def _action(host: Host, module: Label) -> Callable[..., Any]:
    return lambda **kw: host.running_impl("action").ctx_action(**kw)


def _action_json(host: Host, module: Label) -> Callable[..., Any]:
    return lambda text: host.running_impl("action").ctx_action(**json.loads(text))


def _register_json(host: Host, module: Label) -> Callable[..., Any]:
    return lambda rule, name, text, stack: host.register_target(rule, name, json.loads(text), stack)


def _expand(host: Host, module: Label) -> Callable[..., Any]:
    return lambda **kw: host.running_impl("expand").ctx_expand(**kw)


def _expand_json(host: Host, module: Label) -> Callable[..., Any]:
    return lambda text: host.running_impl("expand").ctx_expand(**json.loads(text))


# Bazel's BUILD-file functions.
BUILD_BUILTINS: Mapping[str, Bind] = MappingProxyType(
    {
        "glob": lambda host, module: host.glob,
        "package_name": lambda host, module: host.package_name,
        "repository_name": _fixed(lambda: "@"),
        "exports_files": lambda host, module: host.exports_files,
        "package": lambda host, module: host.package_decl,
        "licenses": _fixed(_ignored_licenses),
        "package_group": _fixed(_ignored),
        "_rbs_parse_label": lambda host, module: functools.partial(_parse_label_in, module),
    }
)

# What prelude.rbs and the shipped rules call; private names, so no user file can load
# them from another module.
RBS_BUILTINS: Mapping[str, Bind] = MappingProxyType(
    {
        "_rbs_new_rule": lambda host, module: functools.partial(host.new_rule, module),
        "_rbs_new_provider": lambda host, module: functools.partial(host.new_provider, module),
        "_rbs_register_target": lambda host, module: host.register_target,
        "_rbs_register_target_json": _register_json,
        "_rbs_glob": lambda host, module: host.glob,
        "_rbs_package_name": lambda host, module: host.package_name,
        "_rbs_exports_files": lambda host, module: host.exports_files,
        "_rbs_job_spec": _fixed(_job_spec),
        "_rbs_new_aspect": lambda host, module: functools.partial(host.new_aspect, module),
        "_rbs_existing_rules": lambda host, module: host.existing_rules,
        "_rbs_existing_rule": lambda host, module: host.existing_rule,
        "_rbs_params": lambda host, module: host.function_params,
        "_rbs_parse_label": lambda host, module: functools.partial(_parse_label_in, module),
        "_rbs_declare": _declare,
        "_rbs_action": _action,
        "_rbs_action_json": _action_json,
        "_rbs_expand": _expand,
        "_rbs_expand_json": _expand_json,
    }
)

# The rules every BUILD file sees without a load() (defined in rules/builtins.rbs).
NATIVES = (
    "genrule",
    "filegroup",
    "sh_binary",
    "sh_test",
    "sh_library",
    "py_binary",
    "py_library",
    "py_test",
    "config_setting",
    "constraint_setting",
    "constraint_value",
    "platform",
    "toolchain",
    "toolchain_type",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FileKind:
    """How one kind of file is evaluated: its dialect and every name it sees."""

    name: str
    dialect: Any  # starlark.Dialect
    builtins: Mapping[str, Bind]
    natives: tuple[str, ...]  # loaded from BUILTINS_MODULE before the file
    prelude: bool  # prelude.rbs is evaluated into the module first

    def bind(self, module: Any, host: Host, label: Label) -> None:
        """Put this kind's Python builtins into a fresh `starlark.Module`."""
        for name, bind in self.builtins.items():
            value = bind(host, label)
            if callable(value):
                module.add_callable(name, value)
            else:
                module[name] = value

    def natives_ast(self, text: str | None = None) -> Any:
        """The `load()` of the native rules, parsed once per process. With the `text` of
        the file, only the natives it may name (their names appear in it), each from the
        module that defines it, so that a BUILD file of genrules loads no other rule
        module; without it (or for a name the file uses but does not have), all of them
        from BUILTINS_MODULE."""
        if text is None:
            names = self.natives
            lines = [f"load({BUILTINS_MODULE!r}, {', '.join(repr(n) for n in names)})"]
        else:
            names = tuple(n for n in self.natives if n in text)
            where = _native_modules()
            by_module: dict[str, list[str]] = {}
            for n in names:
                module, remote = where.get(n, (BUILTINS_MODULE, n))
                by_module.setdefault(module, []).append(f"{n} = {remote!r}")
            lines = [f"load({mod!r}, {', '.join(ns)})" for mod, ns in by_module.items()]
        key = "*" if text is None else ",".join(names)
        text = "\n".join(lines) + "\n"
        return _parsed((NATIVES_NAME, f"{self.name}:{key}"), NATIVES_NAME, text, self.dialect)


@functools.cache
def _native_modules() -> dict[str, tuple[str, str]]:
    """Native rule name -> (the `@rbs//` module that defines it, its name there), from
    BUILTINS_MODULE's own load() statements."""
    from rbs.build.workspace import rules_root

    path = rules_root() / BUILTINS_MODULE.removeprefix("@rbs//")
    out: dict[str, tuple[str, str]] = {}
    for ld in sl.parse(BUILTINS_MODULE, path.read_text(), RBS_DIALECT).loads():
        module = "@rbs//" + ld.module_id.removeprefix(":")
        for local, remote in ld.symbols.items():
            out[local] = (module, remote)
    return out


BUILD_FILE = FileKind(
    name="BUILD", dialect=BUILD_DIALECT, builtins=BUILD_BUILTINS, natives=NATIVES, prelude=False
)
RBS_FILE = FileKind(
    name=".rbs", dialect=RBS_DIALECT, builtins=RBS_BUILTINS, natives=("native",), prelude=True
)

_ASTS: dict[tuple[str, str], Any] = {}


def _parsed(key: tuple[str, str], name: str, text: str, dialect: Any) -> Any:
    # An AstModule can be evaluated into any number of modules.
    ast = _ASTS.get(key)
    if ast is None:
        ast = _ASTS[key] = sl.parse(name, text, dialect)
    return ast


@functools.cache
def shipped_text(name: str) -> str:
    """A Starlark file shipped as package data of rbs.build (prelude.rbs, compat.rbs):
    read beside this module, where an installed package has it (importlib.resources
    costs more than the read), else through importlib.resources."""
    try:
        return Path(__file__).with_name(name).read_text()
    except OSError:
        from importlib import resources

        return resources.files("rbs.build").joinpath(name).read_text()


def prelude_text() -> str:
    return shipped_text("prelude.rbs")


def prelude_ast() -> Any:
    """prelude.rbs, parsed once per process."""
    ast = _ASTS.get((PRELUDE_NAME, ""))
    if ast is None:
        ast = _parsed((PRELUDE_NAME, ""), PRELUDE_NAME, prelude_text(), RBS_DIALECT)
    return ast
