"""Labels (`//pkg:name`, `:name`, `@rbs//path/file.rbs`) and target patterns (`//pkg/...`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rbs.build.errors import BuildError

RBS_REPO = "rbs"  # `@rbs//...` names the rule libraries shipped with rbs (the `rules/` folder)
_NAME = re.compile(r"[A-Za-z0-9!%@^_\"#$&'()*\-+,;<=>?\[\]{|}~/.]+")
_PKG = re.compile(r"[A-Za-z0-9!%@^_\"#$&'()*\-+,;<=>?\[\]{|}~/. ]*")


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Label:
    """A target or file name: repository ('' = this workspace), package path, target name."""

    repo: str = ""
    package: str
    name: str

    def __post_init__(self) -> None:
        # The checks depend on the text alone: each package and name is checked once.
        if self.package not in _VALID_PACKAGES:
            _check_package(self.package, str(self))
            _remember(_VALID_PACKAGES, self.package)
        if self.name not in _VALID_NAMES:
            _check_name(self.name, str(self))
            _remember(_VALID_NAMES, self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        # Labels in a cached analysis were checked when parsed; skip the checks on load.
        return (_unchecked_label, (self.repo, self.package, self.name))

    def __str__(self) -> str:
        repo = f"@{self.repo}" if self.repo else ""
        return f"{repo}//{self.package}:{self.name}"

    def sibling(self, name: str) -> Label:
        return Label(repo=self.repo, package=self.package, name=name)

    @property
    def path(self) -> str:
        """The file this label names, relative to its repository root."""
        return f"{self.package}/{self.name}" if self.package else self.name


_VALID_PACKAGES: set[str] = set()
_VALID_NAMES: set[str] = set()
_MAX_REMEMBERED = 1 << 20


def _remember(valid: set[str], text: str) -> None:
    if len(valid) >= _MAX_REMEMBERED:
        valid.clear()
    valid.add(text)


def _unchecked_label(repo: str, package: str, name: str) -> Label:
    obj = object.__new__(Label)
    object.__setattr__(obj, "repo", repo)
    object.__setattr__(obj, "package", package)
    object.__setattr__(obj, "name", name)
    return obj


def _check_package(package: str, text: str) -> None:
    if package.startswith("/") or package.endswith("/") or "//" in package:
        raise ValueError(f"invalid package in label {text!r}: no leading, trailing or double '/'")
    if any(part in (".", "..") for part in package.split("/")):
        raise ValueError(f"invalid package in label {text!r}: '.' and '..' are not allowed")
    if not _PKG.fullmatch(package):
        raise ValueError(f"invalid characters in the package of label {text!r}")


def _check_name(name: str, text: str) -> None:
    if not name:
        raise ValueError(f"empty target name in label {text!r}")
    if name.startswith("/") or name.endswith("/") or "//" in name:
        raise ValueError(f"invalid target name in label {text!r}: no leading or trailing '/'")
    if any(part in (".", "..") for part in name.split("/")):
        raise ValueError(f"invalid target name in label {text!r}: '.' and '..' are not allowed")
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid characters in the target name of label {text!r}")


def parse_label(text: str, *, package: str = "", repo: str = "") -> Label:
    """Parse a label as written in `package` of `repo` (for relative forms `:x` and `x`)."""
    key = (text, package, repo)
    have = _PARSED.get(key)
    if have is None:
        have = _parse_label(text, package, repo)
        if len(_PARSED) >= _MAX_REMEMBERED:
            _PARSED.clear()
        _PARSED[key] = have
    return have


# Labels are immutable, so one parse serves every later equal call (labels are parsed
# again and again: each attribute value at loading, each file owner at analysis).
_PARSED: dict[tuple[str, str, str], Label] = {}


def _parse_label(text: str, package: str, repo: str) -> Label:
    raw = text
    if not text:
        raise ValueError("empty label; write //pkg:name or :name")
    if text.startswith("@"):
        head, sep, rest = text[1:].partition("//")
        if not sep:
            raise ValueError(f"invalid label {raw!r}: write @repo//pkg:name")
        repo = "" if head in ("", "__main__") else head
        text = "//" + rest
    if text.startswith("//"):
        body = text[2:]
        pkg, colon, name = body.partition(":")
        if not colon:
            name = pkg.rsplit("/", 1)[-1]
            if not name:
                raise ValueError(f"invalid label {raw!r}: //:name or //pkg names a target")
        return Label(repo=repo, package=pkg, name=name)
    if text.startswith(":"):
        return Label(repo=repo, package=package, name=text[1:])
    if ":" in text:
        raise ValueError(f"invalid label {raw!r}: write //pkg:name for a label in another package")
    return Label(repo=repo, package=package, name=text)


def parse_load_label(text: str, *, package: str, repo: str = "") -> Label:
    """Parse the label in a `load()`: `//pkg:defs.rbs`, `:defs.rbs`, `@rbs//job/rules.rbs`."""
    body = text.split("//", 1)[1] if "//" in text else ""
    if "//" in text and ":" not in body and body.endswith((".rbs", ".bzl")):
        # `@rbs//job/rules.rbs` and `//pkg/defs.rbs` name a file path directly.
        pkg, _, name = body.rpartition("/")
        head = text.split("//", 1)[0]
        repo = head[1:] if head.startswith("@") else repo
        repo = "" if repo == "__main__" else repo
        return Label(repo=repo, package=pkg, name=name)
    label = parse_label(text, package=package, repo=repo)
    if not label.name.endswith((".rbs", ".bzl")):
        raise ValueError(f"cannot load {text!r}: a loaded file's name ends in .rbs (or .bzl)")
    return label


@dataclass(frozen=True, slots=True, kw_only=True)
class Pattern:
    """A target pattern: one target, all targets of a package, or all packages below one."""

    package: str
    name: str | None = None  # None with recursive=False means `:all`
    recursive: bool = False

    def matches_package(self, package: str) -> bool:
        if not self.recursive:
            return package == self.package
        return not self.package or package == self.package or package.startswith(self.package + "/")

    def __str__(self) -> str:
        if self.recursive:
            return f"//{self.package}/..." if self.package else "//..."
        return f"//{self.package}:{self.name or 'all'}"


def parse_pattern(text: str, *, cwd_package: str = "") -> Pattern:
    """Parse `//...`, `//pkg/...`, `//pkg:all`, `//pkg:*`, `//pkg:name`, `:name`, `pkg/...`."""
    raw = text
    if text.startswith("@"):
        raise BuildError(
            f"pattern {raw!r} names another repository",
            hint="build targets of this workspace, e.g. //pkg:target or //...",
        )
    if not text.startswith("//"):
        if text.startswith(":"):
            text = f"//{cwd_package}{text}"
        else:
            joined = f"{cwd_package}/{text}" if cwd_package else text
            text = "//" + joined
    body = text[2:]
    if body == "..." or body.endswith("/..."):
        pkg = body[: -len("...")].rstrip("/")
        try:
            _check_package(pkg, raw)
        except ValueError as e:
            raise BuildError(str(e), hint="write //pkg/... or //...") from None
        return Pattern(package=pkg, recursive=True)
    pkg, colon, name = body.partition(":")
    try:
        _check_package(pkg, raw)
        if colon and name not in ("all", "*", "all-targets"):
            _check_name(name, raw)
    except ValueError as e:
        raise BuildError(str(e), hint="write //pkg:name, //pkg:all or //pkg/...") from None
    if not colon:
        name = pkg.rsplit("/", 1)[-1]
        if not name:
            raise BuildError(f"pattern {raw!r} names no target", hint="write //:name or //...")
    if name in ("all", "*", "all-targets"):
        return Pattern(package=pkg, name=None)
    return Pattern(package=pkg, name=name)
