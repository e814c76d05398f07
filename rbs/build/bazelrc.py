"""`.bazelrc` files read as Bazel reads them: the options a command gets from its rc files.

Bazel prepends to a command's own flags the rc lines that apply to it: `common` lines,
then the lines of the command and of the commands it inherits from (`test` and `run`
inherit `build`), in file order. `--config=NAME` expands, in place, the `common:NAME`,
`build:NAME` (...) lines. `import FILE` and `try-import FILE` read another file at that
point (`%workspace%` is the workspace root); a missing `import` is an error, a missing
`try-import` is not. rbs reads the workspace's `.bazelrc` and the `--bazelrc` files
(not /etc/bazel.bazelrc or ~/.bazelrc, so a build reads only files of its workspace).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The commands whose rc lines a command also gets, its own last.
_INHERITS = {"build": ("build",), "test": ("build", "test"), "run": ("build", "run")}
_MAX_DEPTH = 20  # imports and --config expansions nest at most this deep


class RcError(ValueError):
    """An rc file that cannot be read as Bazel would; the message names file:line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RcArg:
    """One option from an rc file and where it came from (`file:line`)."""

    text: str
    source: str


@dataclass(slots=True)
class RcFiles:
    """Every rc line, by `command` or `command:config`, in the order Bazel reads them."""

    lines: dict[str, list[RcArg]] = field(default_factory=dict)

    def read(self, path: Path, workspace: Path, *, optional: bool, depth: int = 0) -> None:
        if depth > _MAX_DEPTH:
            raise RcError(f"{path}: imports nest more than {_MAX_DEPTH} deep (an import cycle?)")
        try:
            text = path.read_text()
        except FileNotFoundError:
            if optional:
                return
            raise RcError(f"rc file {path} does not exist") from None
        except OSError as e:
            raise RcError(f"cannot read rc file {path}: {e.strerror}") from None
        for lineno, line in _logical_lines(text):
            where = f"{path}:{lineno}"
            try:
                words = shlex.split(line, comments=True)
            except ValueError as e:
                raise RcError(f"{where}: {e}") from None
            if not words:
                continue
            head, args = words[0], words[1:]
            if head in ("import", "try-import"):
                if len(args) != 1:
                    raise RcError(f"{where}: {head} takes one file name")
                target = Path(args[0].replace("%workspace%", str(workspace)))
                if not target.is_absolute():
                    target = path.parent / target
                self.read(target, workspace, optional=head == "try-import", depth=depth + 1)
                continue
            command, _, config = head.partition(":")
            if command == "always":
                command = "common"
            key = f"{command}:{config}" if config else command
            self.lines.setdefault(key, []).extend(RcArg(text=a, source=where) for a in args)

    def args_for(self, command: str, cli_configs: Sequence[str] = ()) -> list[RcArg]:
        """The rc options of `command`, with every --config expanded (those given on the
        command line, in `cli_configs`, after the plain rc lines, as Bazel orders them)."""
        chain = ("common", *_INHERITS.get(command, (command,)))
        out: list[RcArg] = []
        for c in chain:
            out.extend(self._expand(self.lines.get(c, []), chain, ()))
        for name in cli_configs:
            out.extend(self._config(name, chain, (), "the command line"))
        return out

    def _expand(
        self, args: list[RcArg], chain: tuple[str, ...], seen: tuple[str, ...]
    ) -> list[RcArg]:
        out: list[RcArg] = []
        it = iter(args)
        for a in it:
            name = None
            if a.text.startswith("--config="):
                name = a.text[len("--config=") :]
            elif a.text == "--config":
                nxt = next(it, None)
                if nxt is None:
                    raise RcError(f"{a.source}: --config needs a name")
                name = nxt.text
            if name is None:
                out.append(a)
            else:
                out.extend(self._config(name, chain, seen, a.source))
        return out

    def _config(
        self, name: str, chain: tuple[str, ...], seen: tuple[str, ...], where: str
    ) -> list[RcArg]:
        if name in seen:
            raise RcError(f"{where}: --config={name} expands itself: {' -> '.join([*seen, name])}")
        keys = [f"{c}:{name}" for c in chain if f"{c}:{name}" in self.lines]
        if not keys:
            known = sorted({k.partition(":")[2] for k in self.lines if ":" in k})
            raise RcError(
                f"{where}: --config={name}: no rc line defines it "
                f"(configs defined: {', '.join(known) or 'none'})"
            )
        out: list[RcArg] = []
        for k in keys:
            out.extend(self._expand(self.lines[k], chain, (*seen, name)))
        return out


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines joined where one ends in a backslash, each with its first line number."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for i, raw in enumerate(text.splitlines(), start=1):
        if not buf:
            start = i
        if raw.endswith("\\"):
            buf.append(raw[:-1])
            continue
        buf.append(raw)
        out.append((start, " ".join(buf)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


def rc_args(
    workspace: Path,
    command: str,
    *,
    bazelrc: Sequence[str] = (),
    configs: Sequence[str] = (),
    ignore_rc: bool = False,
) -> list[RcArg]:
    """The options `rbs COMMAND` takes from rc files, in order (see the module docstring)."""
    rc = RcFiles()
    if not ignore_rc:
        rc.read(workspace / ".bazelrc", workspace, optional=True)
        for name in bazelrc:
            if name == "/dev/null":
                break  # as in Bazel: stops reading further --bazelrc files
            rc.read(Path(name), workspace, optional=False)
    elif configs:
        raise RcError(f"--config={configs[0]} needs rc files, but rc files are ignored")
    return rc.args_for(command, configs)
