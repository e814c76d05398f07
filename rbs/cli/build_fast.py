"""`rbs build` without click when nothing changed: the no-op answer in a few stat() calls.

An up-to-date build is the most common one, so it is answered before click or the
build engine is imported; anything else goes to the click command in rbs.cli.build
(rbs.cli.main hands it over when `main` returns None).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

_BOOL_FLAGS = {"--plain", "-k", "--keep-going", "--keep_going"}
_VALUE_FLAGS = {"-j", "--jobs"}


def _patterns(argv: list[str]) -> list[str] | None:
    """The patterns of a plain `rbs build` command line, or None if it is anything else."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in _BOOL_FLAGS:
            i += 1
        elif a in _VALUE_FLAGS and i + 1 < len(argv) and argv[i + 1].isdigit():
            i += 2
        elif a.startswith("--jobs=") or (a.startswith("-j") and a[2:].isdigit()):
            i += 1
        elif a.startswith("-"):
            return None
        else:
            out.append(a)
            i += 1
    return out or None


def main(argv: list[str]) -> int | None:
    """0 when the build is a no-op; None hands the call to the click command."""
    started = time.monotonic()
    patterns = _patterns(argv)
    if patterns is not None:
        try:
            from rbs.build.labels import parse_pattern
            from rbs.build.state import BuildState, request_key
            from rbs.build.workspace import find_root

            root = find_root(Path.cwd())
            extra: list[str] = []
            warnings: list[str] = []
            if (root / ".bazelrc").exists():
                # Its --define lines are part of the request, keyed as run_build keys them.
                from rbs.build.flags import rc_settings

                settings = rc_settings(root, "build")
                key = settings.config.key()
                extra = [f"--config:{key}"] if key else []
                warnings = settings.warnings
            rel = Path.cwd().resolve().relative_to(root).as_posix()
            cwd = "" if rel == "." else rel
            request = request_key(
                [*(str(parse_pattern(p, cwd_package=cwd)) for p in patterns), *extra], "", "build"
            )
            if BuildState.load(root).is_noop(request):
                for w in warnings:
                    print(f"rbs: {w}", file=sys.stderr)
                print(f"rbs: up to date ({time.monotonic() - started:.2f}s)", file=sys.stderr)
                return 0
        except Exception:  # any doubt: the full command decides and reports
            pass
    return None
