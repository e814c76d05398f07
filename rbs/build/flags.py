"""Bazel-style build flags (from rc files and the command line) as the settings of a build.

Click-free, so that the no-op fast path (rbs.cli.build_fast) can key a build with a
`.bazelrc` as the full command does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rbs.build.bazelrc import RcError, rc_args
from rbs.build.select import BuildConfig, parse_define

# Bazel flags that rbs accepts in rc files and needs no setting for: it always behaves so,
# or the flag only changes Bazel's own output.
_NO_EFFECT = {
    "incompatible_strict_action_env",
    "verbose_failures",
    "color",
    "curses",
    "show_timestamps",
    "announce_rc",
    "progress_report_interval",
    "show_progress_rate_limit",
    "nosandbox_debug",
    "sandbox_debug",
    "enable_platform_specific_config",
    "experimental_ui_max_stdouterr_bytes",
    "noexperimental_check_output_files",
    "enable_bzlmod",  # rbs reads MODULE.bazel roots either way
}


@dataclass(slots=True)
class Settings:
    """What rc files and the command line set for one build."""

    jobs: int | None = None
    keep_going: bool | None = None
    defines: list[tuple[str, str]] = field(default_factory=list)
    flags: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def config(self) -> BuildConfig:
        return BuildConfig(defines=tuple(self.defines), flags=tuple(self.flags))


def _jobs(value: str, where: str) -> int:
    if value == "auto":
        return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        raise RcError(f"{where}: --jobs={value}: give a number or auto") from None
    if n < 1:
        raise RcError(f"{where}: --jobs={value}: must be at least 1")
    return n


def apply_args(s: Settings, args: Sequence[tuple[str, str]]) -> None:
    """Apply Bazel-style options (`text`, `where it came from`) to `s`, in order;
    RcError names the option and where it came from."""
    items = list(args)
    i = 0
    while i < len(items):
        text, where = items[i]
        i += 1
        name, eq, value = text.partition("=")
        takes_value = name in ("--define", "--jobs", "-j")
        if takes_value and not eq:
            if i >= len(items):
                raise RcError(f"{where}: {name} needs a value")
            value, i = items[i][0], i + 1
        if name == "--define":
            try:
                s.defines.append(parse_define(value))
            except ValueError as e:
                raise RcError(f"{where}: {e}") from None
        elif name in ("--jobs", "-j"):
            s.jobs = _jobs(value, where)
        elif name.startswith("-j") and name[2:].isdigit():
            s.jobs = _jobs(name[2:], where)
        elif name in ("--keep_going", "--keep-going", "-k"):
            s.keep_going = True
        elif name in ("--nokeep_going", "--nokeep-going"):
            s.keep_going = False
        elif name.startswith(("--//", "--@")):
            s.flags.append((name[2:], value if eq else "True"))
        elif name.startswith("--no//"):
            s.flags.append((name[4:], "False"))
        elif name.lstrip("-") in _NO_EFFECT:
            continue
        else:
            s.warnings.append(f"{where}: ignoring {text}: not a flag rbs knows")


def rc_settings(
    root: Path,
    command: str,
    *,
    bazelrc: Sequence[str] = (),
    configs: Sequence[str] = (),
    ignore_rc: bool = False,
    defines: Sequence[str] = (),
    settings: Sequence[str] = (),
) -> Settings:
    """The settings of `rbs COMMAND`: rc file options first, then the `--define`s and
    `--//pkg:flag=value` build settings given on the command line (a later value wins,
    as in Bazel)."""
    s = Settings()
    rc = rc_args(root, command, bazelrc=bazelrc, configs=configs, ignore_rc=ignore_rc)
    apply_args(s, [(a.text, a.source) for a in rc])
    apply_args(s, [(f"--define={d}", "--define") for d in defines])
    apply_args(s, [(w, "the command line") for w in settings])
    return s
