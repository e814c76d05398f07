"""The `rbs` entry point; every command group is registered here, in one table.

Start-up time is part of the product: `rbs job submit` runs in shell loops, so this
module imports nothing heavy. Click groups are imported only when invoked, and the
`job` group (hand-written on argparse, see docs/design/jobs.md) is dispatched before
click is imported at all.
"""

from __future__ import annotations

import sys

# name -> (module, attribute, one-line help). The one place commands are registered.
# The attribute is a click command, except for FAST_COMMANDS, whose attribute is a
# `main(argv) -> int` function.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "cas": ("rbs.cli.cas", "cas", "Operate the content-addressed store."),
    "remote": ("rbs.cli.remote", "remote", "Run the remote cache and execution server."),
    "run": ("rbs.cli.build", "run", "Build and run an executable target."),
    "test": ("rbs.cli.build", "test", "Build and run tests; summarize passes and failures."),
    "query": ("rbs.cli.build", "query", "List targets and their dependencies."),
    "clean": ("rbs.cli.build", "clean", "Delete build outputs (rbs-out/) and state."),
}
FAST_COMMANDS: dict[str, tuple[str, str, str]] = {
    "job": ("rbs.cli.job", "main", "Submit and manage batch jobs on the cluster."),
    "build": ("rbs.cli.build_fast", "main", "Build targets from BUILD files."),
}


def main() -> None:
    argv = sys.argv[1:]
    if argv and argv[0] in FAST_COMMANDS:
        import importlib

        module, attr, _ = FAST_COMMANDS[argv[0]]
        sys.exit(getattr(importlib.import_module(module), attr)(argv[1:]))
    from rbs.cli.root import cli

    cli()
