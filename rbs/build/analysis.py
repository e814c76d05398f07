"""Analysis: a pure function from loaded targets to an action graph (nothing runs here)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import starlark as sl

from rbs.build import expand as mk
from rbs.build.errors import BuildError, closest, location_from_starlark, starlark_message
from rbs.build.graph import BIN_DIR, DEFAULT_PATH, ActionGraph, ActionSpec, File, TargetInfo
from rbs.build.labels import Label, parse_label
from rbs.build.loader import Loader
from rbs.build.rules import LABEL_KINDS, Target

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


class _Current:
    """The rule implementation being run: what it declared and the actions it registered."""

    def __init__(self, target: Target, deps: dict[Label, TargetInfo]) -> None:
        self.target = target
        self.deps = deps
        self.declared: dict[str, File] = {}
        self.produced: set[str] = set()


class Analyzer:
    """Runs rule implementations in dependency order and collects their actions."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.ws = loader.ws
        self.ws_name = loader.ws.name
        self.infos: dict[Label, TargetInfo] = {}
        self.plain: dict[Label, dict[str, Any]] = {}
        self.actions: list[ActionSpec] = []
        self.producers: dict[str, int] = {}
        self._stack: list[Label] = []
        self._cur: _Current | None = None
        if sys.getrecursionlimit() < 10000:
            sys.setrecursionlimit(10000)

    # -- resolution -----------------------------------------------------------------

    def resolve(
        self, label: Label, *, referrer: Target | None = None, attr: str = ""
    ) -> TargetInfo:
        """The info of any label: a rule target, a generated file or a source file."""
        info = self.infos.get(label)
        if info is not None:
            return info
        where = referrer.location if referrer else None
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
        if label.name in pkg.targets:
            return self._analyze(pkg.targets[label.name])
        if label.name in pkg.outputs:
            owner = self._analyze(pkg.targets[pkg.outputs[label.name]])
            path = f"{BIN_DIR}/{label.path}"
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
        self.infos[label] = info
        self.plain[label] = _plain_info(info, {})
        return info

    def _outputs_of(self, label: Label) -> list[File]:
        return [
            File.from_starlark(f) for f in _files(self.plain[label]["p"]["DefaultInfo"]["files"])
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
        try:
            deps: dict[Label, TargetInfo] = {}
            for attr, dep in target.deps():
                deps[dep] = self.resolve(dep, referrer=target, attr=attr)
            info = self._run_impl(target, deps)
        finally:
            self._stack.pop()
        self.infos[label] = info
        return info

    def _ctx_data(
        self, target: Target, deps: dict[Label, TargetInfo], cur: _Current
    ) -> dict[str, Any]:
        label = target.label
        attr: dict[str, Any] = {}
        files: dict[str, Any] = {}
        single: dict[str, Any] = {}
        exe: dict[str, Any] = {}
        outputs: dict[str, Any] = {}
        for name, spec in target.rule.all_attrs().items():
            if spec.ignored and name not in ("tags", "testonly"):
                continue  # every value crossing into Starlark costs; rules never read these
            value = target.attrs.get(name)
            if spec.kind in LABEL_KINDS:
                labels = [] if value is None else [value] if spec.kind == "label" else value
                infos = [deps[x] for x in labels]
                for i in infos:
                    self._check_files_allowed(target, name, spec.allow_files, i)
                attr[name] = (
                    (self.plain[labels[0]] if labels else None)
                    if spec.kind == "label"
                    else [self.plain[x] for x in labels]
                )
                fl = [f.to_starlark() for i in infos for f in i.files]
                files[name] = fl
                if spec.single_file:
                    if spec.kind == "label" and labels and len(fl) != 1:
                        raise BuildError(
                            f"{target.rule.kind} {label}: attribute {name!r} must name exactly one "
                            f"file, but {labels[0]} has {len(fl)}",
                            location=target.location,
                            hint="point it at a single file or a target with one output",
                        )
                    single[name] = fl[0] if fl else None
                if spec.executable:
                    e = infos[0].executable if infos else None
                    if infos and e is None:
                        raise BuildError(
                            f"{target.rule.kind} {label}: attribute {name!r} needs an executable, "
                            f"but {labels[0]} is not one",
                            location=target.location,
                            hint="use an sh_binary, py_binary or another executable target",
                        )
                    exe[name] = e.to_starlark() if e else None
            elif spec.kind in ("output", "output_list"):
                names = [] if not value else [value] if spec.kind == "output" else value
                fs = []
                for n in names:
                    f = self._declare(cur, n, predeclared=True)
                    fs.append(f.to_starlark())
                outputs[name] = (
                    fs[0]
                    if spec.kind == "output" and fs
                    else (None if spec.kind == "output" else fs)
                )
                attr[name] = outputs[name]
            else:
                attr[name] = value
        attr["name"] = label.name
        return {
            "label": {"name": label.name, "package": label.package, "repo": label.repo},
            "attr": attr,
            "files": files,
            "file": single,
            "executable": exe,
            "outputs": outputs,
            "bin_dir": BIN_DIR,
            "workspace_name": self.ws_name,
            "build_file_path": self.loader.packages[label.package].build_file,
            "var": {
                "COMPILATION_MODE": "fastbuild",
                "BINDIR": BIN_DIR,
                "GENDIR": BIN_DIR,
                "TARGET_CPU": "k8",
            },
        }

    def _check_files_allowed(
        self, target: Target, attr: str, allow: bool | tuple[str, ...], dep: TargetInfo
    ) -> None:
        if dep.kind not in ("source file", "generated file"):
            return
        if allow is True:
            return
        if allow and any(dep.label.name.endswith(ext) for ext in allow):
            return
        want = f"files ending in {', '.join(allow)}" if allow else "no files, only rule targets"
        raise BuildError(
            f"{target.rule.kind} {target.label}: {dep.kind} {dep.label} is misplaced in attribute "
            f"{attr!r} (it takes {want})",
            location=target.location,
            hint="name a rule target there, or fix the file name",
        )

    def _run_impl(self, target: Target, deps: dict[Label, TargetInfo]) -> TargetInfo:
        cur = _Current(target, deps)
        prev = self._cur
        self._cur = cur
        hooks = self.loader.impl_hooks
        saved = dict(hooks)
        hooks.update(
            _rbs_declare=self._h_declare, _rbs_action=self._h_action, _rbs_expand=self._h_expand
        )
        try:
            data = self._ctx_data(target, deps, cur)
            result = self.loader.call_impl(target.rule, data)
        except sl.StarlarkError as e:
            raise self._impl_error(target, str(e)) from None
        finally:
            self._cur = prev
            hooks.clear()
            hooks.update(saved)
        return self._finish(target, cur, result)

    def _impl_error(self, target: Target, text: str) -> BuildError:
        msg = starlark_message(text)
        is_fail = "error: fail:" in text
        loc = location_from_starlark(text) if is_fail else target.location
        where = f" (defined at {target.location})" if is_fail and target.location else ""
        hint = (
            "fix the target's attributes, or the rule that called fail()"
            if is_fail
            else "fix the target's attributes"
        )
        return BuildError(
            f"in {target.rule.kind} {target.label}{where}: {msg}", location=loc, hint=hint
        )

    def _finish(self, target: Target, cur: _Current, result: Any) -> TargetInfo:
        label = target.label
        providers: dict[str, Any] = {}
        for p in result or []:
            providers[str(p["_p"])] = p["fields"]
        di = providers.pop("DefaultInfo", None)
        if di is None:
            predeclared = [f.to_starlark() for f in cur.declared.values()]
            di = {
                "files": {"_d": predeclared},
                "executable": None,
                "default_runfiles": {"_r": predeclared},
            }
        files = tuple(File.from_starlark(f) for f in _files(di.get("files")))
        exe_d = di.get("executable")
        exe = File.from_starlark(exe_d) if isinstance(exe_d, dict) and "_f" in exe_d else None
        runfiles = [File.from_starlark(f) for f in _files(di.get("default_runfiles"))]
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
            is_test=rule.test,
            location=target.location,
            deps=tuple(cur.deps),
            providers=providers,
        )
        canon = {
            "files": {"_d": [f.to_starlark() for f in files]},
            "executable": exe.to_starlark() if exe else None,
            "default_runfiles": {"_r": [f.to_starlark() for f in runfiles]},
        }
        self.plain[label] = {"_t": str(label), "p": {"DefaultInfo": canon, **providers}}
        if rule.test and exe is not None:
            self._add_test_action(target, exe, tuple(runfiles))
        return info

    def _add_test_action(self, target: Target, exe: File, runfiles: tuple[File, ...]) -> None:
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
                inputs=tuple(sorted({exe.path, *(f.path for f in runfiles)})),
                links=tuple(sorted((f"{rf}/{f.short_path}", f.path) for f in runfiles)),
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
            )
        )

    # -- hooks called from Starlark while an implementation runs ------------------

    def _declare(
        self,
        cur: _Current,
        filename: str,
        *,
        sibling: dict[str, Any] | None = None,
        predeclared: bool = False,
    ) -> File:
        pkg = cur.target.label.package
        if (
            not isinstance(filename, str)
            or not filename
            or filename.startswith("/")
            or ".." in filename.split("/")
        ):
            raise ValueError(
                f"declare_file: bad file name {filename!r}; use a relative name like 'out.txt'"
            )
        if sibling is not None:
            base = File.from_starlark(sibling).short_path.rpartition("/")[0]
            short = f"{base}/{filename}" if base else filename
        else:
            short = f"{pkg}/{filename}" if pkg else filename
        path = f"{BIN_DIR}/{short}"
        have = cur.declared.get(path)
        if have is not None:
            if predeclared:
                return have
            raise ValueError(
                f"declare_file: {filename!r} is already declared by {cur.target.label}"
            )
        owner = self.producers.get(path)
        if owner is not None:
            raise ValueError(
                f"declare_file: {short!r} is already an output of {self.actions[owner].owner}"
            )
        f = File(path=path, short_path=short, is_source=False, owner=str(cur.target.label))
        cur.declared[path] = f
        return f

    def _h_declare(self, filename: str, sibling: Any = None) -> dict[str, Any]:
        assert self._cur is not None
        return self._declare(
            self._cur, filename, sibling=sibling if isinstance(sibling, dict) else None
        ).to_starlark()

    def _files_from(
        self, values: Any, cur: _Current, *, tools: bool = False
    ) -> tuple[list[File], list[tuple[str, str]]]:
        """Files named by action arguments (files, depsets, targets) plus tool runfiles links."""
        files: list[File] = []
        links: list[tuple[str, str]] = []
        for v in _flatten(values):
            if isinstance(v, dict) and "_f" in v:
                files.append(File.from_starlark(v))
            elif isinstance(v, dict) and "_t" in v:
                info = self.infos[parse_label(str(v["_t"]))]
                files.extend(info.files)
                if info.executable is not None:
                    files.append(info.executable)
            else:
                raise ValueError(
                    f"expected a File, depset or target in an action's inputs, got {v!r}"
                )
        if tools:
            for f in list(files):
                owner_info = self._exe_info(f)
                if owner_info is not None:
                    rf = f"{f.path}.runfiles/{self.ws_name}"
                    for r in owner_info.runfiles:
                        files.append(r)
                        links.append((f"{rf}/{r.short_path}", r.path))
        return files, links

    def _exe_info(self, f: File) -> TargetInfo | None:
        owner = parse_label(f.owner)
        info = self.infos.get(owner)
        if info is not None and info.executable == f:
            return info
        return None

    def _h_action(self, kind: str, outputs: Any, **kw: Any) -> None:
        cur = self._cur
        assert cur is not None
        outs: list[File] = []
        for o in _flatten(outputs):
            if (
                not (isinstance(o, dict) and "_f" in o)
                or File.from_starlark(o).path not in cur.declared
            ):
                raise ValueError(
                    f"action output {o.get('short_path', o) if isinstance(o, dict) else o!r} was not "
                    "declared by this rule; use ctx.actions.declare_file or an attr.output"
                )
            f = File.from_starlark(o)
            if f.path in cur.produced:
                raise ValueError(f"two actions of {cur.target.label} create {f.short_path!r}")
            outs.append(f)
        if not outs:
            raise ValueError("an action needs at least one output")
        inputs, links = self._files_from(kw.get("inputs") or [], cur)
        tool_files, tool_links = self._files_from(kw.get("tools") or [], cur, tools=True)
        mnemonic = str(kw.get("mnemonic") or "Action")
        env = dict(kw.get("env") or {})
        env.setdefault("PATH", DEFAULT_PATH)
        exe_out: tuple[str, ...] = ()
        content = b""
        argv: tuple[str, ...] = ()
        if kind == "run":
            exe = kw.get("executable")
            if isinstance(exe, str):
                argv = (exe,)
            elif isinstance(exe, dict) and ("_f" in exe or "_t" in exe):
                if "_t" in exe:
                    info = self.infos[parse_label(str(exe["_t"]))]
                    if info.executable is None:
                        raise ValueError(f"ctx.actions.run: {info.label} is not executable")
                    exe = info.executable.to_starlark()
                efiles, elinks = self._files_from([exe], cur, tools=True)
                tool_files += efiles
                tool_links += elinks
                argv = (efiles[0].path,)
            else:
                raise ValueError(
                    "ctx.actions.run needs executable = a File, a target or a path string"
                )
            argv += tuple(str(a) for a in kw.get("arguments") or [])
        elif kind == "shell":
            command = kw.get("command")
            if not isinstance(command, str):
                raise ValueError("ctx.actions.run_shell needs command = a string")
            args = [str(a) for a in kw.get("arguments") or []]
            argv = ("/bin/bash", "-c", command, *(["", *args] if args else []))
            kind = "run"
        elif kind == "write":
            content = kw.get("content", "")
            if not isinstance(content, str):
                raise ValueError(
                    f"ctx.actions.write: content must be a string, got {type(content).__name__}"
                )
            content_b = content.encode()
            if kw.get("is_executable"):
                exe_out = (outs[0].path,)
            self._register(
                cur,
                ActionSpec(
                    kind="write",
                    mnemonic="FileWrite",
                    owner=cur.target.label,
                    outputs=(outs[0].path,),
                    content=content_b,
                    executable_outputs=exe_out,
                ),
            )
            return
        elif kind == "copy":
            if len(inputs) != 1:
                raise ValueError("ctx.actions.symlink needs exactly one target_file")
            if kw.get("is_executable"):
                exe_out = (outs[0].path,)
            self._register(
                cur,
                ActionSpec(
                    kind="copy",
                    mnemonic="Symlink",
                    owner=cur.target.label,
                    outputs=(outs[0].path,),
                    inputs=(inputs[0].path,),
                    executable_outputs=exe_out,
                ),
            )
            return
        all_in = sorted({f.path for f in (*inputs, *tool_files)})
        spec = ActionSpec(
            kind="run",
            mnemonic=mnemonic,
            owner=cur.target.label,
            outputs=tuple(f.path for f in outs),
            inputs=tuple(all_in),
            argv=argv,
            env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
            links=tuple(sorted(set(links + tool_links))),
            content=content,
            progress=str(kw.get("progress_message") or ""),
        )
        self._register(cur, spec)

    def _register(self, cur: _Current, spec: ActionSpec) -> None:
        idx = len(self.actions)
        self.actions.append(spec)
        for out in spec.outputs:
            cur.produced.add(out)
            self.producers[out] = idx

    def _h_expand(self, text: str, vars: dict[str, str], targets: list[Any], attribute: str) -> str:
        cur = self._cur
        assert cur is not None
        pkg = cur.target.label.package
        extra = [parse_label(str(t["_t"])) for t in targets if isinstance(t, dict) and "_t" in t]

        def locate(label_text: str, field: str, many: bool, func: str) -> str:
            try:
                lab = parse_label(label_text, package=pkg)
            except ValueError as e:
                raise ValueError(f"$({func} {label_text}): {e}") from None
            files: list[File]
            own = [f for f in cur.declared.values() if f.short_path == lab.path]
            if own:
                files = own
            elif lab in cur.deps or lab in extra:
                info = self.infos[lab]
                files = [info.executable] if info.executable else list(info.files)
            else:
                raise ValueError(
                    f"$({func} {label_text}): {lab} is not a dependency of {cur.target.label}; "
                    "add it to srcs, tools or data"
                )
            if not many and len(files) != 1:
                raise ValueError(
                    f"$({func} {label_text}) expands to {len(files)} files; use $({func}s {label_text})"
                )
            if field == "rlocation":
                return " ".join(f"{self.ws_name}/{f.short_path}" for f in files)
            return " ".join(getattr(f, field) for f in files)

        try:
            return mk.expand(text, {str(k): str(v) for k, v in vars.items()}, locate)
        except ValueError as e:
            where = f"attribute {attribute!r}: " if attribute else ""
            raise ValueError(f"{where}{e}") from None

    # -- results --------------------------------------------------------------------

    def graph(self) -> ActionGraph:
        return ActionGraph(
            actions=tuple(self.actions), targets=dict(self.infos), workspace_name=self.ws_name
        )


def _flatten(values: Any) -> Iterable[Any]:
    if values is None:
        return
    if isinstance(values, dict) and "_d" in values:
        yield from values["_d"]
        return
    if isinstance(values, dict):
        yield values
        return
    for v in values:
        if isinstance(v, dict) and "_d" in v:
            yield from v["_d"]
        elif isinstance(v, list):
            yield from _flatten(v)
        elif v is not None:
            yield v


def _files(v: Any) -> list[dict[str, Any]]:
    if v is None:
        return []
    if isinstance(v, dict):
        for key in ("_d", "_r"):
            if key in v:
                return [x for x in v[key] if isinstance(x, dict) and "_f" in x]
        return [v] if "_f" in v else []
    return [x for x in v if isinstance(x, dict) and "_f" in x]


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
