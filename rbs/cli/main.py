"""The `rbs` root command; every command group is registered here, in one table.

Groups are imported only when invoked, so `rbs job submit` does not pay for
importing the build engine or grpc.
"""

from __future__ import annotations

import importlib

import click

from rbs import __version__

# name -> (module, attribute, one-line help). The one place commands are registered.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "cas": ("rbs.cli.cas", "cas", "Operate the content-addressed store."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attr, _ = entry
        cmd = getattr(importlib.import_module(module), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rbs")
def cli() -> None:
    """rbs: Starlark builds, a remote cache and executor, and batch jobs on one cluster."""


def main() -> None:
    cli()
