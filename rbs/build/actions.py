"""The ctx.actions side of analysis: declared files, registered actions, make variables.

These methods run while a rule implementation executes: Starlark calls them through
the `_rbs_declare`, `_rbs_action` and `_rbs_expand` hooks with plain data.
"""

from __future__ import annotations

import json
from typing import Any

from rbs.build import expand as mk
from rbs.build.graph import CONFIG_BIN_DIRS, DEFAULT_PATH, ActionSpec, File, TargetInfo
from rbs.build.labels import Label, parse_label
from rbs.build.rules import Target


class Current:
    """The rule implementation being run: what it declared and the actions it registered."""

    def __init__(self, target: Target, deps: dict[Label, TargetInfo]) -> None:
        self.target = target
        self.deps = deps
        self.declared: dict[str, File] = {}
        self.produced: set[str] = set()
        # Output attributes and rule(outputs = ...): the default outputs when the rule
        # returns no DefaultInfo(files = ...).
        self.predeclared: list[File] = []
        # ctx.outputs.executable of an executable or test rule (used or not).
        self.implicit_exe: File | None = None


class ActionHooks:
    """Mixin of the analyser: what a rule implementation's ctx.actions calls do."""

    infos: dict[Label, TargetInfo]
    actions: list[ActionSpec]
    producers: dict[str, int]
    ws_name: str
    _cur: Current | None
    bin_dir: str  # where this configuration's outputs go (graph.CONFIG_BIN_DIRS)

    def config_infos(self, config: str) -> dict[Label, TargetInfo]:
        """Target infos of a configuration ("target", "host", "exec"): the analyser's own
        or a sibling's, for tools."""
        return self.infos

    def _info_of(self, label: Label, cfg: object = "") -> TargetInfo:
        # A target analysed for a tool's configuration says which in its plain form.
        first = (
            self.config_infos(cfg)
            if isinstance(cfg, str) and cfg in CONFIG_BIN_DIRS
            else self.infos
        )
        info = first.get(label)
        for config in CONFIG_BIN_DIRS:
            if info is None:
                info = self.config_infos(config).get(label)
        if info is None:
            raise ValueError(f"{label} is not a dependency of this target; add it to an attribute")
        return info

    def _declare(
        self,
        cur: Current,
        filename: str,
        *,
        sibling: dict[str, Any] | None = None,
        predeclared: bool = False,
        directory: bool = False,
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
        path = f"{self.bin_dir}/{short}"
        have = cur.declared.get(path)
        if have is not None:
            if predeclared or have == cur.implicit_exe:
                # declare_file(ctx.label.name) in an executable rule is ctx.outputs.executable.
                return have
            raise ValueError(
                f"declare_file: {filename!r} is already declared by {cur.target.label}"
            )
        owner = self.producers.get(path)
        if owner is not None:
            raise ValueError(
                f"declare_file: {short!r} is already an output of {self.actions[owner].owner}"
            )
        f = File(
            path=path,
            short_path=short,
            is_source=False,
            owner=str(cur.target.label),
            is_directory=directory,
        )
        cur.declared[path] = f
        if predeclared:
            cur.predeclared.append(f)
        return f

    def ctx_declare(
        self, filename: str, sibling: Any = None, directory: bool = False
    ) -> dict[str, Any]:
        assert self._cur is not None
        return self._declare(
            self._cur,
            filename,
            sibling=sibling if isinstance(sibling, dict) else None,
            directory=bool(directory),
        ).to_starlark()

    def _files_from(
        self, values: Any, cur: Current, *, tools: bool = False
    ) -> tuple[list[File], list[tuple[str, str]]]:
        """Files named by action arguments (files, depsets, targets) plus tool runfiles links."""
        files: list[File] = []
        links: list[tuple[str, str]] = []
        for v in _flatten(values):
            if isinstance(v, dict) and "_f" in v:
                files.append(File.from_starlark(v))
            elif isinstance(v, dict) and "_t" in v:
                info = self._info_of(parse_label(str(v["_t"])), v.get("_c"))
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
                    for rel, r in owner_info.runfiles_links:
                        files.append(r)
                        links.append((f"{f.path}.runfiles/{rel}", r.path))
        return files, links

    def _exe_info(self, f: File) -> TargetInfo | None:
        owner = parse_label(f.owner)
        config = next((c for c, d in CONFIG_BIN_DIRS.items() if f.path.startswith(d + "/")), "")
        infos = self.config_infos(config) if config else self.infos
        info = infos.get(owner)
        if info is not None and info.executable == f:
            return info
        return None

    def ctx_action(self, kind: str, outputs: Any, **kw: Any) -> None:
        cur = self._cur
        assert cur is not None
        outs: list[File] = []
        for o in _flatten(outputs):
            f = File.from_starlark(o) if isinstance(o, dict) and "_f" in o else None
            if f is None or f.path not in cur.declared:
                raise ValueError(
                    f"action output {o.get('short_path', o) if isinstance(o, dict) else o!r} was not "
                    "declared by this rule; use ctx.actions.declare_file or an attr.output"
                )
            if f.path in cur.produced:
                raise ValueError(f"two actions of {cur.target.label} create {f.short_path!r}")
            outs.append(f)
        if not outs:
            raise ValueError("an action needs at least one output")
        if kind in ("write", "copy", "template") and outs[0].is_directory:
            api = {"copy": "symlink", "template": "expand_template"}.get(kind, kind)
            raise ValueError(
                f"ctx.actions.{api}: the output {outs[0].short_path!r} is a directory "
                "(declare_directory); only run and run_shell can create a directory"
            )
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
                    info = self._info_of(parse_label(str(exe["_t"])), exe.get("_c"))
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
        elif kind == "template":
            self._register(cur, template_action(cur.target.label, outs[0], inputs, kw))
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
            executable_outputs=tuple(
                File.from_starlark(f).path for f in _flatten(kw.get("executable_outputs") or [])
            ),
            output_dirs=tuple(f.path for f in outs if f.is_directory),
            input_dirs=tuple(sorted({f.path for f in (*inputs, *tool_files) if f.is_directory})),
        )
        self._register(cur, spec)

    def _register(self, cur: Current, spec: ActionSpec) -> None:
        idx = len(self.actions)
        self.actions.append(spec)
        for out in spec.outputs:
            cur.produced.add(out)
            self.producers[out] = idx

    def ctx_expand(
        self, text: str, vars: dict[str, str], targets: list[Any], attribute: str
    ) -> str:
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
                info = cur.deps.get(lab) or self._info_of(lab)
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


def template_action(owner: Label, out: File, inputs: list[File], kw: dict[str, Any]) -> ActionSpec:
    """ctx.actions.expand_template: the template's text with each substitution applied
    in turn (as Bazel does), computed by the backend once the template exists."""
    if len(inputs) != 1:
        raise ValueError("ctx.actions.expand_template needs template = one File")
    subs = kw.get("substitutions") or {}
    return ActionSpec(
        kind="template",
        mnemonic="TemplateExpand",
        owner=owner,
        outputs=(out.path,),
        inputs=(inputs[0].path,),
        content=json.dumps(list(subs.items())).encode(),
        executable_outputs=(out.path,) if kw.get("is_executable") else (),
    )


def expand_template_text(template: bytes, content: bytes) -> bytes:
    """What a "template" action writes (see `template_action`)."""
    out = template
    for key, value in json.loads(content):
        out = out.replace(key.encode(), value.encode())
    return out


def runfiles_links(v: Any, ws_name: str) -> list[tuple[str, File]]:
    """The symlinks and root symlinks of plain runfiles, as paths below the runfiles root."""
    if not isinstance(v, dict):
        return []
    out = [(f"{ws_name}/{path}", File.from_starlark(f)) for path, f in v.get("_rs", [])]
    out += [(str(path), File.from_starlark(f)) for path, f in v.get("_rr", [])]
    return out


def _flatten(values: Any) -> list[Any]:
    # A list, not a generator: called for every action's outputs and inputs.
    if values is None:
        return []
    if isinstance(values, dict):
        return list(values["_d"]) if "_d" in values else [values]
    out: list[Any] = []
    for v in values:
        if isinstance(v, dict) and "_d" in v:
            out.extend(v["_d"])
        elif isinstance(v, list):
            out.extend(_flatten(v))
        elif v is not None:
            out.append(v)
    return out


def files_in(v: Any) -> list[dict[str, Any]]:
    if v is None:
        return []
    if isinstance(v, dict):
        for key in ("_d", "_r"):
            if key in v:
                return [x for x in v[key] if isinstance(x, dict) and "_f" in x]
        return [v] if "_f" in v else []
    return [x for x in v if isinstance(x, dict) and "_f" in x]
