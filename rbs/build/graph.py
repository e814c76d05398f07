"""The analysis result: files, actions and providers, as frozen, hashable domain types."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rbs.build.errors import Location
from rbs.build.labels import Label


def _new(cls: type[Any], values: tuple[Any, ...]) -> Any:
    """Rebuild a frozen slots dataclass from its field values without re-validating.

    Pickling these through dataclasses' default state protocol costs ~10 us per object;
    a cached analysis holds tens of thousands of them and is loaded on every rebuild."""
    obj = object.__new__(cls)
    for name, value in zip(cls.__slots__, values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


def _reduce(self: Any) -> tuple[Any, ...]:
    cls = type(self)
    get = _GETTERS.get(cls)
    if get is None:
        # attrgetter of several names returns their values as one tuple, in C.
        get = _GETTERS[cls] = operator.attrgetter(*cls.__slots__)
    return (_new, (cls, get(self)))


_GETTERS: dict[type[Any], Callable[[Any], tuple[Any, ...]]] = {}


# Generated files live under the same exec-root-relative folder as in Bazel, so that
# $(location), $@ and $(RULEDIR) expand to the same text and genrule outputs that embed
# paths are byte-identical to Bazel's.
BIN_DIR = "bazel-out/k8-fastbuild/bin"
# Tools are built in another configuration, each under its own output folder, named as
# Bazel 4.2.3 names them with default options (seen in its bazel-out/), so that
# `$(execpath tool)` and `File.path` read the same: a genrule's `tools` and `cfg = "host"`
# attributes use the host configuration, `cfg = "exec"` attributes the exec one.
HOST_BIN_DIR = "bazel-out/host/bin"
EXEC_BIN_DIR = "bazel-out/k8-opt-exec-2B5CBBC6/bin"
CONFIG_BIN_DIRS = {"target": BIN_DIR, "host": HOST_BIN_DIR, "exec": EXEC_BIN_DIR}
DEFAULT_PATH = "/bin:/usr/bin:/usr/local/bin"


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class File:
    """A source or generated file, named by its path relative to the exec root."""

    __reduce__ = _reduce

    path: str
    short_path: str
    is_source: bool
    owner: str  # label of the target that owns (or generates) the file
    is_directory: bool = False  # a tree artifact (ctx.actions.declare_directory)

    @property
    def basename(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def to_starlark(self) -> dict[str, Any]:
        # Compact on purpose: starlark-pyo3 converts every element separately, so a
        # four-item list crosses far faster than a dict of nine fields.
        f: list[Any] = [self.path, self.short_path, self.is_source, self.owner]
        if self.is_directory:
            f.append(True)
        return {"_f": f}

    @classmethod
    def from_starlark(cls, d: Mapping[str, Any]) -> File:
        raw = d["_f"]
        try:
            key = tuple(raw)
            have = _FILES.get(key)
        except TypeError:  # an unhashable part: made below, where str() and bool() apply
            key, have = None, None
        if have is not None:
            return have
        path, short_path, is_source, owner = raw[:4]
        f = cls(
            path=str(path),
            short_path=str(short_path),
            is_source=bool(is_source),
            owner=str(owner),
            is_directory=len(raw) > 4 and bool(raw[4]),
        )
        if key is not None:
            if len(_FILES) >= _MAX_FILES:
                _FILES.clear()
            _FILES[key] = f
        return f


# File values met in analysis, by their plain form: a file is read back from Starlark
# once per target that sees it, and a frozen dataclass costs a few microseconds to make.
_FILES: dict[tuple[Any, ...], File] = {}
_MAX_FILES = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionSpec:
    """One action of the graph: a command (or a file write/copy) with its inputs and outputs.

    `kind` is "run" (a process; becomes a REAPI Action), "write" (bytes from analysis) or
    "copy" (an output that is a byte copy of one input, e.g. sh_binary's script).
    """

    __reduce__ = _reduce

    kind: str
    mnemonic: str
    owner: Label
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # Extra input-root paths that are copies of an input (runfiles trees of tools).
    links: tuple[tuple[str, str], ...] = ()
    working_directory: str = ""
    content: bytes = b""
    executable_outputs: tuple[str, ...] = ()
    progress: str = ""
    is_test: bool = False
    timeout_s: int = 0  # 0: no limit (build actions); tests get one from size/timeout
    # Tree artifacts: which outputs and inputs are directories (their files, not one blob).
    output_dirs: tuple[str, ...] = ()
    input_dirs: tuple[str, ...] = ()

    def describe(self) -> str:
        return self.progress or f"{self.mnemonic} {self.owner}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetInfo:
    """What analysis knows about one target: its outputs and providers."""

    __reduce__ = _reduce

    label: Label
    kind: str
    files: tuple[File, ...]
    executable: File | None = None
    runfiles: tuple[File, ...] = ()
    # ctx.runfiles(symlinks = ..., root_symlinks = ...): path below the runfiles root -> file.
    runfiles_links: tuple[tuple[str, File], ...] = ()
    is_test: bool = False
    location: Location | None = None
    deps: tuple[Label, ...] = ()
    # For executables: the `args` and `env` attributes, used by `rbs run` (and tests).
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # Providers other than DefaultInfo, as plain data (JSON-like), keyed by provider key.
    providers: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionGraph:
    """All actions needed for some targets, plus every analysed target's info."""

    actions: tuple[ActionSpec, ...]
    targets: Mapping[Label, TargetInfo]
    workspace_name: str = "__main__"

    def producer(self) -> dict[str, int]:
        """Output path -> index of the action that creates it."""
        return {out: i for i, a in enumerate(self.actions) for out in a.outputs}
