"""The `rbs` entry point: a command's fast entry point if it has one, else the click root.

Start-up time is part of the product: `rbs job submit` runs in shell loops, so this
module imports nothing heavy. A command with a fast entry point in rbs.cli.commands
(a plain `rbs job submit`, a no-op `rbs build`) is answered before click is imported;
every other call, and every call a fast entry point hands back, goes to the click root
(rbs.cli.root), which imports each command's module only when it is invoked.
"""

from __future__ import annotations

import sys

from rbs.cli.commands import COMMANDS
from rbs.cli.guard import guarded


def main() -> None:
    # One guard around everything: no traceback reaches a user (rbs.cli.guard).
    guarded(_main)


def _main() -> None:
    argv = sys.argv[1:]
    entry = COMMANDS.get(argv[0]) if argv else None
    if entry is not None and entry[3] is not None:
        # __import__, not importlib.import_module: importlib's package costs a shell
        # loop of submits its import (and warnings') for one call.
        module, _, attr = entry[3].partition(":")
        code = getattr(__import__(module, fromlist=[attr]), attr)(argv[1:])
        if code is not None:
            sys.exit(code)
    from rbs.cli.root import cli

    # Named, not detected (`python -m rbs` under -m): usage lines read `rbs ...`, and the
    # completion scripts' variable is click's `_RBS_COMPLETE` however rbs was started.
    cli.main(prog_name="rbs")
