"""The click root group: every command of rbs.cli.commands, imported on first use."""

from __future__ import annotations

import importlib

import click
from click.shell_completion import CompletionItem

from rbs import __version__
from rbs.cli.commands import COMMANDS

# Every command inherits these from the root: one help style for all of them.
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _, _ = entry
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # From the table, so `rbs --help` imports none of the command modules.
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        # Command names and their help from the table, as for --help: completing `rbs `
        # imports none of the command modules. Options still come from click.
        if incomplete.startswith("-"):
            return super().shell_complete(ctx, incomplete)
        return [
            CompletionItem(name, help=COMMANDS[name][2])
            for name in self.list_commands(ctx)
            if name.startswith(incomplete)
        ]


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="rbs")
def cli() -> None:
    """rbs: Starlark builds, a remote cache and executor, and batch jobs on one cluster."""
