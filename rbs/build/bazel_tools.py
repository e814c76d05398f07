"""The few `@bazel_tools` targets that Bazel rules depend on, provided by rbs itself.

`@bazel_tools//tools/bash/runfiles` is Bazel's bash runfiles library (`rlocation`). Here it
is a generated file, written from rules/bazel_tools/runfiles.bash, at the runfiles path
Bazel gives it (`bazel_tools/tools/bash/runfiles/runfiles.bash`), so that the usual
`source "$0.runfiles/$f"` snippet finds it in rbs's runfiles trees.
"""

from __future__ import annotations

from typing import Any

from rbs.build.graph import BIN_DIR, ActionSpec, File, TargetInfo
from rbs.build.labels import Label
from rbs.build.workspace import rules_root

BASH_RUNFILES = Label(repo="bazel_tools", package="tools/bash/runfiles", name="runfiles")
_RUNFILES_PATH = "bazel_tools/tools/bash/runfiles/runfiles.bash"
_LIBRARY = "bazel_tools/runfiles.bash"  # below rules/


def provided(label: Label) -> bool:
    return label == BASH_RUNFILES or (
        label.repo == BASH_RUNFILES.repo
        and label.package == BASH_RUNFILES.package
        and label.name in ("runfiles", "runfiles.bash")
    )


def register(an: Any, label: Label) -> TargetInfo:
    """Put the library into an analyser (once per build: the configurations share it)."""
    info, action = bash_runfiles()
    # The library's text is part of the analysis: a changed rbs must not reuse it.
    an.loader.files_read["@rbs//bazel_tools/runfiles.bash"] = rules_root() / _LIBRARY
    if info.label not in an.infos:
        if action.outputs[0] not in an.producers:
            an.producers[action.outputs[0]] = len(an.actions)
            an.actions.append(action)
        an.infos[info.label] = info
        f = info.files[0].to_starlark()
        an.plain[info.label] = {
            "_t": str(info.label),
            "p": {
                "DefaultInfo": {
                    "files": {"_d": [f]},
                    "executable": None,
                    "default_runfiles": {"_r": [], "_rr": [[info.runfiles_links[0][0], f]]},
                }
            },
        }
    an.infos[label] = an.infos[info.label]
    an.plain[label] = an.plain[info.label]
    return an.infos[label]  # type: ignore[no-any-return]


def bash_runfiles() -> tuple[TargetInfo, ActionSpec]:
    """The library's target info and the action that writes its one file."""
    short = "../" + _RUNFILES_PATH
    f = File(
        path=f"{BIN_DIR}/external/{_RUNFILES_PATH}",
        short_path=short,
        is_source=False,
        owner=str(BASH_RUNFILES),
    )
    text = (rules_root() / _LIBRARY).read_bytes()
    action = ActionSpec(
        kind="write",
        mnemonic="FileWrite",
        owner=BASH_RUNFILES,
        outputs=(f.path,),
        content=text,
        executable_outputs=(f.path,),
    )
    info = TargetInfo(
        label=BASH_RUNFILES,
        kind="sh_library",
        files=(f,),
        runfiles_links=((_RUNFILES_PATH, f),),
    )
    return info, action
