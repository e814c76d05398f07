"""`--output_groups`: which of a target's files a build makes and shows (Bazel's syntax).

`--output_groups=a,b` builds only the groups named; `--output_groups=+a,-default` adds
to or takes from the default set (the target's DefaultInfo files, group "default").
A group comes from the target's `OutputGroupInfo(a = depset(...))`; a target without
the group contributes nothing to it, as in Bazel.
"""

from __future__ import annotations

from collections.abc import Sequence

from rbs.build.actions import files_in
from rbs.build.graph import File, TargetInfo

DEFAULT = "default"


def parse_output_groups(values: Sequence[str]) -> tuple[str, ...]:
    """The groups wanted, from repeated and comma-separated flag values."""
    items = [x.strip() for v in values for x in v.split(",") if x.strip()]
    if not items:
        return ()
    if all(x[0] in "+-" for x in items):
        wanted = [DEFAULT]
        for x in items:
            name = x[1:]
            if x[0] == "+" and name not in wanted:
                wanted.append(name)
            elif x[0] == "-" and name in wanted:
                wanted.remove(name)
        return tuple(wanted)
    if any(x[0] in "+-" for x in items):
        raise ValueError(
            f"--output_groups={','.join(items)}: mix of plain names and +/- names; "
            "either list the groups (a,b) or change the default set (+a,-b)"
        )
    return tuple(dict.fromkeys(items))


def group_files(info: TargetInfo, groups: Sequence[str]) -> list[File]:
    """The files of `info` in `groups` (all of DefaultInfo's files for "default")."""
    out: dict[str, File] = {}
    og = info.providers.get("OutputGroupInfo") or {}
    for g in groups:
        if g == DEFAULT:
            chosen = list(info.files)
        else:
            chosen = [File.from_starlark(f) for f in files_in(og.get(g))]
        for f in chosen:
            out.setdefault(f.path, f)
    return list(out.values())
