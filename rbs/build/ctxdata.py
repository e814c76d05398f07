"""The data a rule implementation's ctx is built from: attributes, files, outputs, vars."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rbs.build.actions import Current
from rbs.build.ctxreads import Reads, impl_reads
from rbs.build.errors import BuildError
from rbs.build.existing import features
from rbs.build.graph import File, TargetInfo
from rbs.build.labels import Label
from rbs.build.rules import (
    CTX_LABEL,
    CTX_LABEL_LIST,
    CTX_OUTPUT,
    CTX_PLAIN,
    AttrSpec,
    RuleClass,
    Target,
)
from rbs.build.select import setting_value
from rbs.build.toolchains import template_variables

if TYPE_CHECKING:
    from rbs.build.loader import Loader


_FILE_KINDS = ("source file", "generated file")


class CtxData:
    """Mixin of the analyser: the plain data the prelude makes `ctx` from."""

    loader: Loader
    bin_dir: str
    ws_name: str
    config: str
    plain: dict[Label, dict[str, Any]]

    if TYPE_CHECKING:  # provided by the analyser

        def dep_plain(self, label: Label, spec: AttrSpec, applier: Target) -> dict[str, Any]: ...
        def resolve(
            self, label: Label, *, referrer: Target | None = None, attr: str = ""
        ) -> TargetInfo: ...
        def _declare(
            self,
            cur: Current,
            filename: str,
            *,
            sibling: dict[str, Any] | None = None,
            predeclared: bool = False,
            directory: bool = False,
        ) -> File: ...

    def ctx_reads(self, rule: RuleClass) -> Reads | None:
        """What `rule`'s implementation can read of its ctx (None: anything)."""
        reads = self.loader.impl_reads
        if rule.key not in reads:
            reads[rule.key] = impl_reads(rule.impl, self.loader.module_texts)
        return reads[rule.key]

    def _ctx_data(
        self,
        target: Target,
        deps: dict[Label, TargetInfo],
        cur: Current,
        reads: Reads | None = None,
    ) -> dict[str, Any]:
        """With `reads` (rbs.build.ctxreads), values the implementation cannot read are
        None; every check still runs on them."""
        label = target.label
        attr: dict[str, Any] = {}
        files: dict[str, Any] = {}
        single: dict[str, Any] = {}
        exe: dict[str, Any] = {}
        outputs: dict[str, Any] = {}
        given = target.attrs
        for name, spec, kind in target.rule.ctx_attrs():
            value = given.get(name)
            if kind == CTX_PLAIN:
                attr[name] = value
            elif kind in (CTX_LABEL, CTX_LABEL_LIST):
                labels = [] if value is None else [value] if kind == CTX_LABEL else value
                infos = [deps[x] for x in labels]
                for i in infos:
                    if i.kind in _FILE_KINDS:
                        self._check_files_allowed(target, name, spec.allow_files, i)
                attr[name] = (
                    (self.dep_plain(labels[0], spec, target) if labels else None)
                    if kind == CTX_LABEL
                    else [self.dep_plain(x, spec, target) for x in labels]
                )
                fl = [f.to_starlark() for i in infos for f in i.files]
                files[name] = fl
                if spec.single_file:
                    if kind == CTX_LABEL and labels and len(fl) != 1:
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
            else:
                names = [] if not value else [value] if kind == CTX_OUTPUT else value
                fs = [self._declare(cur, n, predeclared=True).to_starlark() for n in names]
                outputs[name] = (
                    fs[0] if kind == CTX_OUTPUT and fs else (None if kind == CTX_OUTPUT else fs)
                )
                attr[name] = outputs[name]
        for key, filename in target.implicit_outputs().items():
            outputs[key] = self._declare(cur, filename, predeclared=True).to_starlark()
        if reads is not None:
            for field, values in (
                ("attr", attr),
                ("files", files),
                ("file", single),
                ("executable", exe),
                ("outputs", outputs),
            ):
                seen = reads[field]
                for name in values:
                    if name not in seen:
                        values[name] = None
        if target.rule.executable or target.rule.test:
            # Declared before the implementation runs, as in Bazel; it becomes the
            # executable when the rule creates it and returns no other one.
            exe_file = self._declare(cur, label.name)
            cur.implicit_exe = exe_file
            outputs["executable"] = exe_file.to_starlark()
        attr["name"] = label.name
        enabled, disabled = features(self.loader.packages[label.package].features, target)
        return {
            "features": enabled,
            "disabled_features": disabled,
            "label": {"name": label.name, "package": label.package, "repo": label.repo},
            "attr": attr,
            "files": files,
            "file": single,
            "executable": exe,
            "outputs": outputs,
            "bin_dir": self.bin_dir,
            "workspace_name": self.ws_name,
            "build_setting_value": setting_value(label, target.attrs, self.loader.config),
            "build_file_path": self.loader.packages[label.package].build_file,
            "var": {
                # Bazel 4.2's host configuration builds tools with -c opt.
                "COMPILATION_MODE": "fastbuild" if self.config == "target" else "opt",
                "BINDIR": self.bin_dir,
                "GENDIR": self.bin_dir,
                "TARGET_CPU": "k8",
                **template_variables(self, target),
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
