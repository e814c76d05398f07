"""Analysis: a pure function from loaded targets to an action graph (nothing runs here)."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import starlark as sl

from rbs.build import bazel_tools
from rbs.build.actions import ActionHooks, Current, files_in, runfiles_links
from rbs.build.aspects import AspectHooks, Params
from rbs.build.ctxdata import CtxData
from rbs.build.errors import BuildError, closest, location_from_starlark, starlark_message
from rbs.build.graph import (
    CONFIG_BIN_DIRS,
    DEFAULT_PATH,
    ActionGraph,
    ActionSpec,
    File,
    TargetInfo,
)
from rbs.build.labels import Label
from rbs.build.loader import Loader
from rbs.build.pkgcache import AnalysisCache, Frame, Key
from rbs.build.reuse import Reuse
from rbs.build.rules import AttrSpec, Target, config_of
from rbs.build.toolchains import registered_packages, toolchains_for
from rbs.build.unsupported import missing_api

_TEST_WRAPPER = (
    'export TEST_SRCDIR="$(cd .. && pwd)" RUNFILES_DIR="$(cd .. && pwd)" '
    'TEST_TMPDIR="$(mktemp -d)"; exec "$@"'
)


# Bazel's test timeouts (seconds): by `timeout`, else by `size`.
_TIMEOUTS = {"short": 60, "moderate": 300, "long": 900, "eternal": 3600}
_SIZE_TIMEOUTS = {"small": 60, "medium": 300, "large": 900, "enormous": 3600}


def test_timeout(size: object, timeout: object) -> int:
    if isinstance(timeout, str) and timeout in _TIMEOUTS:
        return _TIMEOUTS[timeout]
    return _SIZE_TIMEOUTS.get(size if isinstance(size, str) else "medium", 300)


class Analyzer(Reuse, CtxData, ActionHooks, AspectHooks):
    """Runs rule implementations in dependency order and collects their actions."""

    def __init__(
        self, loader: Loader, config: str = "target", cache: AnalysisCache | None = None
    ) -> None:
        self.config = config
        self.cache = cache
        self._frames: list[Frame] = []
        self._owner: list[Key | None] = []
        self.bin_dir = CONFIG_BIN_DIRS[config]
        self._configs: dict[str, Analyzer] = {config: self}
        self.loader = loader
        self.ws = loader.ws
        self.ws_name = loader.ws.name
        self.infos: dict[Label, TargetInfo] = {}
        self.plain: dict[Label, dict[str, Any]] = {}
        self.actions: list[ActionSpec] = []
        self.producers: dict[str, int] = {}
        self._stack: list[Label] = []
        self._cur: Current | None = None
        self._aspect_results: dict[tuple[str, Label, Params], dict[str, Any]] = {}
        if sys.getrecursionlimit() < 10000:
            sys.setrecursionlimit(10000)

    def config_analyzer(self, config: str) -> Analyzer:
        """The analyser of another configuration (tools: "host", "exec"); all of them
        share one list of actions."""
        an = self._configs.get(config)
        if an is None:
            an = Analyzer(self.loader, config=config, cache=self.cache)
            an.actions, an.producers, an._configs = self.actions, self.producers, self._configs
            an._frames, an._owner = self._frames, self._owner
            self._configs[config] = an
        return an

    def config_infos(self, config: str) -> dict[Label, TargetInfo]:
        return self.config_analyzer(config).infos

    def for_attr_spec(self, spec: AttrSpec) -> Analyzer:
        return self.config_analyzer(config_of(spec, self.config))

    def for_attr(self, target: Target, attr: str) -> Analyzer:
        spec = target.rule.attrs.get(attr)
        return self if spec is None else self.for_attr_spec(spec)

    # -- resolution -----------------------------------------------------------------

    def resolve(
        self, label: Label, *, referrer: Target | None = None, attr: str = ""
    ) -> TargetInfo:
        """The info of any label: a rule target, a generated file or a source file."""
        self._edge(label)
        info = self.infos.get(label) or self._restore(label)
        if info is not None:
            return info
        where = referrer.location if referrer else None
        if bazel_tools.provided(label):
            return bazel_tools.register(self, label)
        if label.repo:
            raise BuildError(
                f"{label}: labels of other repositories cannot be dependencies",
                location=where,
                hint="use targets of this workspace (//pkg:name)",
            )
        try:
            pkg = self.loader.package(label.package)
        except BuildError as e:
            if referrer is None:
                raise
            raise BuildError(
                f"{referrer.rule.kind} {referrer.label}: attribute {attr!r} refers to {label}, "
                f"but {e.message}",
                location=where,
                hint=e.hint,
            ) from None
        if label in self.loader.select_errors:
            raise self.loader.select_errors[label]
        if label.name in pkg.targets:
            return self._analyze(pkg.targets[label.name])
        source = owner_label = None
        if label.name in pkg.outputs:
            owner = self._analyze(pkg.targets[pkg.outputs[label.name]])
            owner_label = owner.label
            path = f"{self.bin_dir}/{label.path}"
            files = tuple(
                f for f in (*owner.files, *self._outputs_of(owner.label)) if f.path == path
            )
            f = (
                files[0]
                if files
                else File(path=path, short_path=label.path, is_source=False, owner=str(owner.label))
            )
            info = TargetInfo(
                label=label, kind="generated file", files=(f,), location=owner.location
            )
        else:
            full = self.ws.root / label.path
            if not full.is_file() or self.ws.package_of_path(label.path) != label.package:
                raise self._no_such_target(
                    label, pkg.names() + self.loader.files_of(label.package), referrer, attr
                )
            f = File(path=label.path, short_path=label.path, is_source=True, owner=str(label))
            info = TargetInfo(label=label, kind="source file", files=(f,))
            source = str(full)
        self.infos[label] = info
        self.plain[label] = _plain_info(info, {})
        self._keep_file(label, source=source or "", owner=owner_label)
        return info

    def _outputs_of(self, label: Label) -> list[File]:
        return [
            File.from_starlark(f) for f in files_in(self.plain[label]["p"]["DefaultInfo"]["files"])
        ]

    def _no_such_target(
        self, label: Label, names: list[str], referrer: Target | None, attr: str
    ) -> BuildError:
        near = closest(label.name, names)
        hint = (
            f"did you mean //{label.package}:{near}?"
            if near
            else (f"//{label.package} defines: {', '.join(names[:12]) or 'nothing'}")
        )
        msg = f"no such target {label}: not a rule, output or file of package //{label.package}"
        if referrer is not None:
            msg = f"{referrer.rule.kind} {referrer.label}: attribute {attr!r} refers to {label}; {msg}"
        return BuildError(msg, location=referrer.location if referrer else None, hint=hint)

    # -- rule targets ---------------------------------------------------------------

    def _analyze(self, target: Target) -> TargetInfo:
        label = target.label
        done = self.infos.get(label)
        if done is not None:
            return done
        if label in self._stack:
            cycle = [*self._stack[self._stack.index(label) :], label]
            raise BuildError(
                "dependency cycle: " + " -> ".join(str(x) for x in cycle),
                location=target.location,
                hint="remove one of these dependencies",
            )
        self._stack.append(label)
        frame = self._begin(label)
        try:
            deps: dict[Label, TargetInfo] = {}
            for attr, dep in target.deps():
                deps[dep] = self.for_attr(target, attr).resolve(dep, referrer=target, attr=attr)
            start = len(self.actions)
            info = self._run_impl(target, deps)
        finally:
            self._stack.pop()
            self._end(frame)
        self.infos[label] = info
        if frame is not None:
            if target.rule.toolchains:
                frame.packages.update(registered_packages(self))
            self._keep_rule(frame, target, start)
        return info

    def _run_impl(self, target: Target, deps: dict[Label, TargetInfo]) -> TargetInfo:
        cur = Current(target, deps)
        prev = self._cur
        self._cur = cur
        prev_impl, self.loader.impl = self.loader.impl, self
        try:
            data = self._ctx_data(target, deps, cur, self.ctx_reads(target.rule))
            data["toolchains"] = toolchains_for(self, target)
            result = self.loader.call_impl(target.rule, data)
        except sl.StarlarkError as e:
            raise self._impl_error(target, str(e)) from None
        finally:
            self._cur = prev
            self.loader.impl = prev_impl
        return self._finish(target, cur, result)

    def _impl_error(self, target: Target, text: str) -> BuildError:
        missing = missing_api(text, self.loader.source_line)
        if missing is not None:
            return BuildError(
                f"in {target.rule.kind} {target.label} (defined at {target.location}): "
                f"{missing[0]}",
                location=missing[1],
                hint="see the README's Bazel compatibility section for what rbs supports",
            )
        msg = starlark_message(text)
        is_fail = "error: fail:" in text
        # A fail() inside the prelude names no user file: the target's own line then.
        loc = (location_from_starlark(text) or target.location) if is_fail else target.location
        moved = target.location is not None and loc != target.location
        where = f" (defined at {target.location})" if moved else ""
        hint = (
            "fix the target's attributes, or the rule that called fail()"
            if is_fail
            else "fix the target's attributes"
        )
        return BuildError(
            f"in {target.rule.kind} {target.label}{where}: {msg}", location=loc, hint=hint
        )

    def _finish(self, target: Target, cur: Current, result: Any) -> TargetInfo:
        label = target.label
        providers: dict[str, Any] = {}
        for p in result or []:
            providers[str(p["_p"])] = p["fields"]
        di = providers.pop("DefaultInfo", None)
        if di is None:
            di = {
                "files": None,
                "executable": None,
                "default_runfiles": {"_r": [f.to_starlark() for f in cur.predeclared]},
            }
        if di.get("files") is None:
            files = tuple(cur.predeclared)
        else:
            files = tuple(File.from_starlark(f) for f in files_in(di.get("files")))
        exe_d = di.get("executable")
        exe = File.from_starlark(exe_d) if isinstance(exe_d, dict) and "_f" in exe_d else None
        implicit = cur.implicit_exe
        if implicit is not None and implicit.path not in cur.produced:
            cur.declared.pop(implicit.path, None)  # an unused ctx.outputs.executable
        elif exe is None and implicit is not None:
            exe = implicit
        if exe is not None:
            if exe not in files:
                files = (*files, exe)  # Bazel builds the executable with the target
            self._mark_executable(cur, exe)
        runfiles = [File.from_starlark(f) for f in files_in(di.get("default_runfiles"))]
        rf_links = tuple(runfiles_links(di.get("default_runfiles"), self.ws_name))
        if exe is not None and exe not in runfiles:
            runfiles.insert(0, exe)
        rule = target.rule
        if (rule.executable or rule.test) and exe is None:
            raise BuildError(
                f"{rule.kind} {label} is executable but returned no DefaultInfo(executable = ...)",
                location=target.location,
                hint="declare the program file and return it as DefaultInfo(executable = f)",
            )
        missing = sorted(p for p in cur.declared if p not in cur.produced)
        if missing:
            raise BuildError(
                f"{rule.kind} {label} declared {missing[0].rsplit('/', 1)[-1]!r} but no action creates it",
                location=target.location,
                hint="pass every declared file as an output of some ctx.actions.* call",
            )
        info = TargetInfo(
            label=label,
            kind=rule.kind,
            files=files,
            executable=exe,
            runfiles=tuple(runfiles),
            runfiles_links=rf_links,
            is_test=rule.test,
            location=target.location,
            deps=tuple(cur.deps),
            args=tuple(target.attrs.get("args") or ()) if exe else (),
            env=tuple(sorted((target.attrs.get("env") or {}).items())) if exe else (),
            providers=providers,
        )
        canon = {
            "files": {"_d": [f.to_starlark() for f in files]},
            "executable": exe.to_starlark() if exe else None,
            "default_runfiles": {
                "_r": [f.to_starlark() for f in runfiles],
                "_rr": [[path, f.to_starlark()] for path, f in rf_links],
            },
        }
        self.plain[label] = {"_t": str(label), "p": {"DefaultInfo": canon, **providers}}
        if self.config != "target":
            self.plain[label]["_c"] = self.config
        if rule.test and exe is not None:
            self._add_test_action(target, exe, tuple(runfiles), rf_links)
        return info

    def _mark_executable(self, cur: Current, exe: File) -> None:
        # The target's executable is made executable (0555) however it was written, as
        # in Bazel: a test rule may write its script with a plain ctx.actions.write().
        idx = self.producers.get(exe.path)
        if exe.path not in cur.produced or idx is None:
            return
        spec = self.actions[idx]
        if exe.path not in spec.executable_outputs:
            self.actions[idx] = dataclasses.replace(
                spec, executable_outputs=(*spec.executable_outputs, exe.path)
            )

    def _add_test_action(
        self,
        target: Target,
        exe: File,
        runfiles: tuple[File, ...],
        rf_links: tuple[tuple[str, File], ...] = (),
    ) -> None:
        rf = f"{exe.path}.runfiles/{self.ws_name}"
        env = {
            "PATH": DEFAULT_PATH,
            "TEST_WORKSPACE": self.ws_name,
            "TEST_TARGET": str(target.label),
        }
        env.update(target.attrs.get("env") or {})
        self.actions.append(
            ActionSpec(
                kind="run",
                mnemonic="TestRunner",
                owner=target.label,
                outputs=(),
                inputs=tuple(
                    sorted({exe.path, *(f.path for f in runfiles), *(f.path for _, f in rf_links)})
                ),
                links=tuple(
                    sorted(
                        {
                            *((f"{rf}/{f.short_path}", f.path) for f in runfiles),
                            *((f"{exe.path}.runfiles/{p}", f.path) for p, f in rf_links),
                        }
                    )
                ),
                argv=(
                    "/bin/bash",
                    "-c",
                    _TEST_WRAPPER,
                    "test",
                    f"./{exe.short_path}",
                    *(target.attrs.get("args") or []),
                ),
                env=tuple(sorted(env.items())),
                working_directory=rf,
                progress=f"Testing {target.label}",
                is_test=True,
                timeout_s=test_timeout(target.attrs.get("size"), target.attrs.get("timeout")),
                input_dirs=tuple(
                    sorted(
                        {f.path for f in (*runfiles, *(f for _, f in rf_links)) if f.is_directory}
                    )
                ),
            )
        )

    # -- results --------------------------------------------------------------------

    def graph(self) -> ActionGraph:
        return ActionGraph(
            actions=tuple(self.actions), targets=dict(self.infos), workspace_name=self.ws_name
        )


def _plain_info(info: TargetInfo, providers: dict[str, Any]) -> dict[str, Any]:
    files = [f.to_starlark() for f in info.files]
    return {
        "_t": str(info.label),
        "p": {
            "DefaultInfo": {
                "files": {"_d": files},
                "executable": None,
                "default_runfiles": {"_r": files},
            },
            **providers,
        },
    }
